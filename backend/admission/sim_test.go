package admission

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// simClock is a Clock moved by hand, timers included: a timer fires (its
// function runs, or its channel gets the time) when advance passes it, in
// the goroutine that advances, in the order of their deadlines.
type simClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*simTimer
}

type simTimer struct {
	clk     *simClock
	at      time.Time
	f       func()
	ch      chan time.Time
	pending bool
}

func newSimClock() *simClock {
	return &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *simClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *simClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *simClock) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := &simTimer{clk: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t, t.ch
}

func (c *simClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &simTimer{clk: c, f: f}
	t.Reset(d)
	return t
}

func (t *simTimer) Reset(d time.Duration) bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.pending
	t.at, t.pending = c.now.Add(d), true
	if !was {
		c.timers = append(c.timers, t)
	}
	return was
}

func (t *simTimer) Stop() bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.pending
	t.pending = false
	c.timers = slices.DeleteFunc(c.timers, func(x *simTimer) bool { return x == t })
	return was
}

// advance moves the clock to at, firing every timer due on the way.
func (c *simClock) advance(at time.Time) {
	for {
		c.mu.Lock()
		var next *simTimer
		for _, t := range c.timers {
			if !t.at.After(at) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = at
			c.mu.Unlock()
			return
		}
		c.now = next.at
		next.pending = false
		c.timers = slices.DeleteFunc(c.timers, func(x *simTimer) bool { return x == next })
		c.mu.Unlock()
		if next.f != nil {
			next.f()
		} else {
			next.ch <- next.at
		}
	}
}

// simResult is what a simulated call's Acquire returned.
type simResult struct {
	client int
	p      *Permit
	err    error
}

// simulation runs closed-loop clients against a controller on a simClock,
// one event at a time: every client makes one call after another, each
// holding its slot for exactly callTime, and its next call arrives at the
// instant the previous ends, before that slot is handed on (a round trip
// of zero: the limit the HTTP test approaches with calls long against
// its round trips). Events at one instant go in the order of the clients.
// Between two events the driver waits until every Acquire has either
// returned or queued, so the run is the same every time.
type simulation struct {
	t        testing.TB
	c        *Controller
	clk      *simClock
	results  chan simResult
	launched int // Acquires started
	returned int // ... and returned
}

// settle waits until every Acquire started has returned or is queued, and
// hands the returned ones to got.
func (s *simulation) settle(got func(simResult)) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case r := <-s.results:
			s.returned++
			got(r)
			continue
		default:
		}
		if s.launched-s.returned == int(s.c.Gauges().Queued.Total) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("simulation stuck: %d acquires started, %d returned, snapshot %+v", s.launched, s.returned, s.c.Snapshot())
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// simShares runs clients[g] closed-loop clients in group g, each call of
// client c of group g in flowOf(g, c, call), over lim for warmup and then
// window, and returns each group's slot time within the window.
func simShares(t testing.TB, lim Limits, k Kind, clients []int, flowOf func(g, c, call int) Flow, callTime, warmup, window time.Duration) []time.Duration {
	t.Helper()
	clk := newSimClock()
	s := &simulation{t: t, c: New(lim, WithEventClock(clk)), clk: clk, results: make(chan simResult, 64)}
	defer s.c.Stop()
	type client struct {
		group, index, calls int
		p                   *Permit
		start, end          time.Time
	}
	var cs []*client
	for g, n := range clients {
		for i := range n {
			cs = append(cs, &client{group: g, index: i})
		}
	}
	t0 := clk.Now()
	from, to := t0.Add(warmup), t0.Add(warmup+window)
	slot := make([]time.Duration, len(clients))
	granted := func(r simResult) {
		if r.err != nil {
			t.Fatalf("client %d refused: %v", r.client, r.err)
		}
		cl := cs[r.client]
		cl.p, cl.start = r.p, clk.Now()
		cl.end = cl.start.Add(callTime)
	}
	acquire := func(i int) {
		cl := cs[i]
		f := flowOf(cl.group, cl.index, cl.calls)
		cl.calls++
		s.launched++
		go func() {
			p, err := s.c.AcquireFlow(context.Background(), k, f)
			s.results <- simResult{i, p, err}
		}()
		s.settle(granted)
	}
	for i := range cs {
		acquire(i)
	}
	for {
		// The next call to end; ties in client order.
		var next *client
		ni := -1
		for i, cl := range cs {
			if cl.p != nil && (next == nil || cl.end.Before(next.end)) {
				next, ni = cl, i
			}
		}
		if next == nil {
			t.Fatal("no call running")
		}
		if next.end.After(to) {
			break
		}
		clk.advance(next.end)
		s.settle(granted)
		// Slot time within the window.
		if st, en := maxTime(next.start, from), next.end; en.After(st) {
			slot[next.group] += en.Sub(st)
		}
		p := next.p
		next.p = nil
		acquire(ni)
		p.Release()
		s.settle(granted)
	}
	for _, cl := range cs {
		if cl.p != nil && to.After(maxTime(cl.start, from)) {
			slot[cl.group] += to.Sub(maxTime(cl.start, from))
		}
	}
	return slot
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestSimulatedShares: the max-min fair allocation, exactly, on a clock
// moved by hand. Conversations with 6, 2 and 1 closed-loop clients over 4
// shell slots get 1.5, 1.5 and 1 slots (not shares proportional to their
// clients), and so do principals with as many clients when the busiest
// mints a conversation for every call. TestFairShareOverHTTP measures the
// same over HTTP, within a margin; the negative control here is the same
// clients as one flow, which comes out proportional to the clients.
func TestSimulatedShares(t *testing.T) {
	lim := Limits{MaxActive: 12, ReservedControl: 2, MaxShell: 4, MaxQueue: 32, QueueWait: time.Hour}
	const callTime, warmup, window = 150 * time.Millisecond, 3 * time.Second, 30 * time.Second
	slots := time.Duration(lim.MaxShell) * window
	fair := []time.Duration{slots * 3 / 8, slots * 3 / 8, slots * 2 / 8}
	tests := []struct {
		name   string
		flowOf func(g, c, call int) Flow
		unfair bool // the negative control: must not come out fair
	}{
		{"conversations", func(g, _, _ int) Flow { return flow("anonymous:", fmt.Sprintf("group-%d", g)) }, false},
		{"principals minting conversations", func(g, c, call int) Flow {
			conv := "c"
			if g == 0 {
				conv = fmt.Sprintf("minted-%d-%d", c, call)
			}
			return flow(fmt.Sprintf("asserted:user-%d", g), conv)
		}, false},
		{"negative control: one flow", func(int, int, int) Flow { return Flow{} }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := simShares(t, lim, Shell, []int{6, 2, 1}, tc.flowOf, callTime, warmup, window)
			t.Logf("slot time %v of %v, max-min fair %v", got, slots, fair)
			switch {
			case tc.unfair && (slices.Equal(got, fair) || got[0] <= fair[0]):
				t.Fatalf("one flow came out fair (%v): the simulation cannot tell fair from FIFO", got)
			case !tc.unfair && !slices.Equal(got, fair):
				t.Fatalf("slot time %v, want exactly %v", got, fair)
			}
		})
	}
}
