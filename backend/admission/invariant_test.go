package admission

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// checkBookkeeping checks, under the lock, what the dispatcher keeps
// incrementally against a recount: the remembered demands in the order
// they lapse, none lapsed yet; effective demand the remembered peak while
// listed, else the demand; the counts by demand; the busy lists.
func checkBookkeeping(t *testing.T, c *Controller, step int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &c.flows
	var prev instant
	listed := map[*flowState]bool{}
	for f := ft.lapsing.head; f != nil; f = f.lapseL.next {
		if f.peakUntil < prev || f.peakUntil <= c.last {
			t.Fatalf("step %d: lapse list out of order or stale at %v (prev %v, now %v)", step, f.peakUntil, prev, c.last)
		}
		prev, listed[f] = f.peakUntil, true
	}
	check := func(f *flowState) {
		for pool := range numPools {
			want := f.demand(pool)
			if listed[f] {
				want = f.peak[pool]
			}
			if f.eff[pool] != want || f.lapseL.in != listed[f] {
				t.Fatalf("step %d: flow %q pool %d: eff %d, want %d (listed %v)", step, f.key, pool, f.eff[pool], want, listed[f])
			}
		}
		if f.busyL.in != (f.busy() > 0) {
			t.Fatalf("step %d: flow %q busy %d, in busy list %v", step, f.key, f.busy(), f.busyL.in)
		}
	}
	recount := func(d *demandCount, flows map[string]*flowState, pool int) {
		n := make([]int32, len(d.n))
		some := 0
		for _, f := range flows {
			if v := f.eff[pool]; v > 0 {
				n[min(v, len(n)-1)]++
				some++
			}
		}
		for v := range n {
			if n[v] != d.n[v] || some != d.some {
				t.Fatalf("step %d: pool %d counts %v (%d), recount %v (%d)", step, pool, d.n, d.some, n, some)
			}
		}
	}
	for _, p := range ft.principals {
		check(p)
		for _, cv := range p.convs {
			check(cv)
		}
		for pool := range numPools {
			recount(&p.convDemand[pool], p.convs, pool)
		}
	}
	for pool := range numPools {
		recount(&ft.demand[pool], ft.principals, pool)
	}
}

// TestBookkeepingAgreesWithRecount: random arrivals, releases, queue
// timeouts and clock moves over six flows; after each, what is kept
// incrementally agrees with a recount.
func TestBookkeepingAgreesWithRecount(t *testing.T) {
	lim := small()
	lim.MaxActive, lim.ReservedControl, lim.MaxShell = 6, 2, 3
	c, clk := fairController(t, lim)
	flows := []Flow{flow("a", "1"), flow("a", "2"), flow("b", "1"), flow("b", "2"), flow("c", "1"), flow("", "")}
	kinds := []Kind{Normal, Shell, Control}
	rng := rand.New(rand.NewPCG(30, 1))
	var held []*Permit
	for step := range 3000 {
		switch r := rng.IntN(10); {
		case r < 5:
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			p, err := c.AcquireFlow(ctx, kinds[rng.IntN(len(kinds))], flows[rng.IntN(len(flows))])
			cancel()
			if err == nil {
				held = append(held, p)
			}
		case r < 8 && len(held) > 0:
			i := rng.IntN(len(held))
			held[i].Release()
			held = append(held[:i], held[i+1:]...)
		default:
			clk.add(time.Duration(rng.IntN(700)) * time.Millisecond)
		}
		checkBookkeeping(t, c, step)
	}
	releaseAll(held)
	checkBookkeeping(t, c, -1)
	assertIdle(t, c)
}

// checkLeast checks, under the lock, that a busy set's least service, where
// it is kept for the instant now, is the least and the number at it of a
// recount over the set.
func checkLeast(tb testing.TB, b *busySet, now instant, what string, step int) {
	tb.Helper()
	if !b.known || b.at != now {
		return
	}
	least, ties := 0.0, 0
	for q := b.list.head; q != nil; q = q.busyL.next {
		switch s := q.servedNow(now); {
		case ties == 0 || s < least:
			least, ties = s, 1
		case s == least:
			ties++
		}
	}
	if ties == 0 || least != b.min || ties != b.ties {
		tb.Fatalf("step %d: %s: least %v (%d at it), recount %v (%d)", step, what, b.min, b.ties, least, ties)
	}
}

// TestLeastServiceAgreesWithRecount: random arrivals and releases over
// many flows, the clock mostly standing still (many decisions at one
// instant, as on the real clock within a tick); after each, the least
// service kept for the instant agrees with a recount.
func TestLeastServiceAgreesWithRecount(t *testing.T) {
	lim := small()
	lim.MaxActive, lim.ReservedControl, lim.MaxShell = 8, 2, 3
	c, clk := fairController(t, lim)
	var flows []Flow
	for _, p := range []string{"a", "b", "c"} {
		for _, cv := range []string{"1", "2", "3", "4"} {
			flows = append(flows, flow(p, cv))
		}
	}
	rng := rand.New(rand.NewPCG(30, 2))
	var held []*Permit
	for step := range 5000 {
		switch r := rng.IntN(20); {
		case r < 9:
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			p, err := c.AcquireFlow(ctx, Normal, flows[rng.IntN(len(flows))])
			cancel()
			if err == nil {
				held = append(held, p)
			}
		case r < 19 && len(held) > 0:
			i := rng.IntN(len(held))
			held[i].Release()
			held = append(held[:i], held[i+1:]...)
		case r == 19:
			clk.add(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		c.mu.Lock()
		checkLeast(t, &c.flows.busyPs, c.last, "principals", step)
		for _, p := range c.flows.principals {
			checkLeast(t, &p.busyConvs, c.last, "conversations of "+p.key, step)
		}
		c.mu.Unlock()
	}
	releaseAll(held)
	assertIdle(t, c)
}
