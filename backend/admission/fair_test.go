package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func fairController(t testing.TB, lim Limits) (*Controller, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return New(lim, WithClock(clk.now)), clk
}

func flow(p, c string) Flow { return Flow{Principal: p, Conversation: c} }

// holdFlow acquires n permits that must be granted at once.
func holdFlow(t testing.TB, c *Controller, k Kind, f Flow, n int) []*Permit {
	t.Helper()
	var ps []*Permit
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		done := make(chan result, 1)
		go func() { p, err := c.AcquireFlow(ctx, k, f); done <- result{p, err} }()
		var r result
		select {
		case r = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("acquire %v for %v #%d queued; snapshot %+v", k, f, i, c.Snapshot())
		}
		cancel()
		if r.err != nil {
			t.Fatalf("acquire %v for %v #%d: %v", k, f, i, r.err)
		}
		ps = append(ps, r.p)
	}
	return ps
}

// enqueueFlow starts an AcquireFlow and waits until it is queued.
func enqueueFlow(t testing.TB, ctx context.Context, c *Controller, k Kind, f Flow) <-chan result {
	t.Helper()
	before := c.Snapshot().Queued.Total
	ch := make(chan result, 1)
	go func() { p, err := c.AcquireFlow(ctx, k, f); ch <- result{p, err} }()
	waitFor(t, func() bool { return c.Snapshot().Queued.Total > before }, "operation queued")
	return ch
}

func small() Limits {
	return Limits{MaxActive: 8, ReservedControl: 2, MaxShell: 4, MaxQueue: 4, QueueWait: time.Minute, FlowReserve: 1}
}

// TestFlowReserveKeepsASlotForANewcomer: one conversation alone gets every
// shell slot but the reserve; another conversation starts at once in it.
func TestFlowReserveKeepsASlotForANewcomer(t *testing.T) {
	c, _ := fairController(t, small())
	g := flow("anonymous:", "greedy")
	held := holdFlow(t, c, Shell, g, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fourth := enqueueFlow(t, ctx, c, Shell, g)
	polite := holdFlow(t, c, Shell, flow("anonymous:", "polite"), 1)
	pending(t, fourth)
	if s := c.Snapshot(); s.Active.Shell != 4 {
		t.Fatalf("shell active %d, want 4", s.Active.Shell)
	}
	// The polite call ends: its slot is the reserve again, not the
	// greedy conversation's fourth.
	polite[0].Release()
	pending(t, fourth)
	releaseAll(held)
	if r := get(t, fourth); r.err != nil {
		t.Fatal(r.err)
	} else {
		r.p.Release()
	}
	assertIdle(t, c)
}

// TestNegativeControlNoReserve: with the reserve off (the old controller's
// behaviour) one conversation takes every slot and a newcomer queues: the
// test above fails without the reserve.
func TestNegativeControlNoReserve(t *testing.T) {
	lim := small()
	lim.FlowReserve = 0
	c, _ := fairController(t, lim)
	held := holdFlow(t, c, Shell, flow("a", "greedy"), 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newcomer := enqueueFlow(t, ctx, c, Shell, flow("a", "polite"))
	pending(t, newcomer)
	releaseAll(held)
	get(t, newcomer).p.Release()
}

// TestFreedSlotGoesToTheLeastServed: with both conversations queued, a freed
// slot goes to the one that has held slots for less time, not to the one
// that queued first.
func TestFreedSlotGoesToTheLeastServed(t *testing.T) {
	lim := small()
	lim.FlowReserve = 0
	c, clk := fairController(t, lim)
	g, p := flow("x", "greedy"), flow("x", "polite")
	held := holdFlow(t, c, Shell, g, 4)
	clk.add(10 * time.Second) // greedy has held 40 slot-seconds
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gq := enqueueFlow(t, ctx, c, Shell, g)
	pq := enqueueFlow(t, ctx, c, Shell, p)
	held[0].Release()
	r := get(t, pq)
	if r.err != nil {
		t.Fatal(r.err)
	}
	pending(t, gq)
	r.p.Release()
	releaseAll(held[1:])
	get(t, gq).p.Release()
	assertIdle(t, c)
}

// TestShareCapWhileOthersWant: while another conversation wants shell
// slots, one conversation holds no more than its max-min fair share of the
// slots less the reserve, even with slots of its own ending.
func TestShareCapWhileOthersWant(t *testing.T) {
	lim := small()
	lim.MaxShell, lim.MaxActive, lim.ReservedControl = 6, 10, 2
	c, clk := fairController(t, lim)
	a, b := flow("x", "a"), flow("x", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ah := holdFlow(t, c, Shell, a, 5) // 6 - reserve
	bh := holdFlow(t, c, Shell, b, 1) // the reserve
	clk.add(time.Second)              // a has held more: ties go to b
	var aq, bq []<-chan result
	for range 2 {
		aq = append(aq, enqueueFlow(t, ctx, c, Shell, a))
		bq = append(bq, enqueueFlow(t, ctx, c, Shell, b))
	}
	// Demands a 7, b 3 over 5 slots (6 less the reserve): shares 2.5
	// each. Slots that a gives up go to b, which queued after a, until b
	// holds its share; the reserve stays free meanwhile.
	ah[0].Release()
	ah[1].Release()
	r := get(t, bq[0])
	if r.err != nil {
		t.Fatal(r.err)
	}
	bh = append(bh, r.p)
	pending(t, bq[1])
	for _, ch := range aq {
		pending(t, ch)
	}
	ah[2].Release()
	r = get(t, bq[1])
	if r.err != nil {
		t.Fatal(r.err)
	}
	bh = append(bh, r.p)
	for _, ch := range aq {
		pending(t, ch)
	}
	ah = ah[1:] // ah[2:] still to release below
	releaseAll(ah[2:])
	releaseAll(bh)
	for _, ch := range aq {
		get(t, ch).p.Release()
	}
	assertIdle(t, c)
}

// TestFullQueueDisplacesTheBiggestHolder: an arrival from a conversation
// with no queue places takes the place of the youngest call of the one
// holding them all; that call gets OVERLOADED at once with its scope, and
// the greedy one's next arrival is refused with scope conversation.
func TestFullQueueDisplacesTheBiggestHolder(t *testing.T) {
	lim := small()
	lim.FlowReserve = 0
	c, _ := fairController(t, lim)
	g, p := flow("anonymous:", "greedy"), flow("anonymous:", "polite")
	held := holdFlow(t, c, Shell, g, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var gq []<-chan result
	for range 4 {
		gq = append(gq, enqueueFlow(t, ctx, c, Shell, g))
	}
	_, err := c.AcquireFlow(ctx, Shell, g)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Scope != ScopeConversation || ref.RetryAfter <= 0 {
		t.Fatalf("greedy arrival at a full queue: %v, want a refusal with scope conversation", err)
	}
	pq := enqueueFlowNoGrow(t, ctx, c, Shell, p)
	r := get(t, gq[3])
	if !errors.Is(r.err, ErrDisplaced) || !errors.Is(r.err, ErrQueueFull) || !errors.As(r.err, &ref) || ref.Scope != ScopeConversation {
		t.Fatalf("youngest greedy call: %v, want displaced", r.err)
	}
	if s := c.Snapshot().Counters; s.Displaced != 1 || s.Rejected != 2 {
		t.Fatalf("counters %+v", s)
	}
	releaseAll(held)
	for _, ch := range append(gq[:3], pq) {
		get(t, ch).p.Release()
	}
	assertIdle(t, c)
}

// enqueueFlowNoGrow is enqueueFlow for an arrival that takes another's
// place (the queue's length stays).
func enqueueFlowNoGrow(t testing.TB, ctx context.Context, c *Controller, k Kind, f Flow) <-chan result {
	t.Helper()
	before := c.Snapshot().Counters.Displaced + c.Snapshot().Counters.Preempted
	ch := make(chan result, 1)
	go func() { p, err := c.AcquireFlow(ctx, k, f); ch <- result{p, err} }()
	waitFor(t, func() bool { s := c.Snapshot().Counters; return s.Displaced+s.Preempted > before }, "place taken")
	return ch
}

// TestControlPreemptsFromTheBiggestHolder: a control call at a full queue
// takes the place of the youngest normal call of the flow holding the most
// normal places, not of whoever queued last.
func TestControlPreemptsFromTheBiggestHolder(t *testing.T) {
	lim := Limits{MaxActive: 4, ReservedControl: 1, MaxShell: 3, MaxQueue: 3, QueueWait: time.Minute}
	c, _ := fairController(t, lim)
	g, p := flow("a", "greedy"), flow("b", "polite")
	held := holdFlow(t, c, Normal, g, 3)
	ctrl := holdFlow(t, c, Control, g, 1) // every slot taken
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g1 := enqueueFlow(t, ctx, c, Normal, g)
	g2 := enqueueFlow(t, ctx, c, Normal, g)
	p1 := enqueueFlow(t, ctx, c, Normal, p) // queued last
	cq := enqueueFlowNoGrow(t, ctx, c, Control, p)
	if r := get(t, g2); !errors.Is(r.err, ErrPreempted) {
		t.Fatalf("greedy's youngest: %v, want preempted", r.err)
	}
	pending(t, p1)
	ctrl[0].Release()
	get(t, cq).p.Release()
	releaseAll(held)
	get(t, g1).p.Release()
	get(t, p1).p.Release()
	assertIdle(t, c)
}

// TestMintedConversationsGainAPrincipalNothing: a principal that opens a
// new conversation for every call holds no more than its share of the
// principals plus the reserve. Every principal's demand is queued before a
// slot frees: a principal that arrives first to free slots nobody else
// wants takes them (admission is work-conserving, and running calls are
// never taken back), so demand launched unordered proved nothing about the
// shares and failed about once in 70 runs.
func TestMintedConversationsGainAPrincipalNothing(t *testing.T) {
	lim := Limits{MaxActive: 20, ReservedControl: 2, MaxShell: 8, MaxQueue: 64, QueueWait: time.Minute, FlowReserve: 1}
	c, clk := fairController(t, lim)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var filler []*Permit // one slot each: no flow alone may take all 8
	for i := range 8 {
		filler = append(filler, holdFlow(t, c, Shell, flow(fmt.Sprintf("operator:f%d", i), "f"), 1)...)
	}
	var waiting []<-chan result
	for i := range 3 { // three polite principals want 2 each
		for range 2 {
			waiting = append(waiting, launch(ctx, c, Shell, flow(fmt.Sprintf("oauth:p%d", i), "c")))
		}
	}
	for i := range 40 { // the minting principal wants everything
		waiting = append(waiting, launch(ctx, c, Shell, flow("oauth:minter", fmt.Sprintf("c%d", i))))
	}
	waitFor(t, func() bool { return c.Snapshot().Queued.Total == 46 }, "every call queued")
	releaseAll(filler)
	// The fillers' demand is remembered for demandMemory: the slots they
	// held come back when it lapses (the re-dispatch timer).
	clk.add(demandMemory + time.Millisecond)
	waitFor(t, func() bool { s := c.Snapshot(); return s.Active.Shell == 8 }, "all shell slots taken")
	perPrincipal := map[string]int{}
	c.mu.Lock()
	for k, p := range c.flows.principals {
		perPrincipal[k] = p.active[poolShell]
	}
	c.mu.Unlock()
	// Shares of 8 - 1 among demands {2,2,2,40}: 1.75 each; the minter may
	// exceed its share by the reserve: 2.75, at most 3 whole slots.
	if n := perPrincipal["oauth:minter"]; n > 3 {
		t.Fatalf("minting principal holds %d shell slots (%v), want <= its share + reserve", n, perPrincipal)
	}
	cancel()
	for _, ch := range waiting {
		if r := <-ch; r.p != nil {
			r.p.Release()
		}
	}
	assertIdle(t, c)
}

func launch(ctx context.Context, c *Controller, k Kind, f Flow) <-chan result {
	ch := make(chan result, 1)
	go func() { p, err := c.AcquireFlow(ctx, k, f); ch <- result{p, err} }()
	return ch
}

// TestFlowTableBounded: flows beyond the cap share buckets, and idle flows
// are forgotten after the idle time.
func TestFlowTableBounded(t *testing.T) {
	lim := defaults()
	lim.MaxFlows = 32
	lim.FlowIdle = time.Minute
	c, clk := fairController(t, lim)
	for i := range 5000 {
		p := holdFlow(t, c, Normal, flow(fmt.Sprintf("asserted:u%d", i%50), fmt.Sprintf("conv-%d", i)), 1)
		p[0].Release()
	}
	f := c.Snapshot().Flows
	if f.Principals > lim.MaxFlows+overflowBuckets || f.Conversations > lim.MaxFlows+overflowBuckets*f.Principals || f.Overflowed == 0 {
		t.Fatalf("flow table not bounded: %+v", f)
	}
	clk.add(2 * time.Minute)
	holdFlow(t, c, Normal, flow("operator:operator", "x"), 1)[0].Release()
	if f := c.Snapshot().Flows; f.Conversations != 1 || f.Principals != 1 {
		t.Fatalf("idle flows not forgotten: %+v", f)
	}
	assertIdle(t, c)
}

// TestRetryAfterFollowsDrainAndRefusals: the retry hint is derived from
// what the controller observes: it grows for a caller refused again and
// again, and shrinks when the class drains fast.
func TestRetryAfterFollowsDrainAndRefusals(t *testing.T) {
	lim := small()
	lim.FlowReserve = 0
	c, clk := fairController(t, lim)
	g := flow("a", "g")
	held := holdFlow(t, c, Shell, g, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var qs []<-chan result
	for range 4 {
		qs = append(qs, enqueueFlow(t, ctx, c, Shell, g))
	}
	hint := func() time.Duration {
		_, err := c.AcquireFlow(ctx, Shell, g)
		var ref *Refusal
		if !errors.As(err, &ref) {
			t.Fatalf("want a refusal, got %v", err)
		}
		return ref.RetryAfter
	}
	idleHint := hint()       // nothing has drained: the longest hint
	clk.add(3 * time.Second) // that refusal is no longer recent
	for range 3 {
		held[0].Release()
		r := get(t, qs[0])
		held, qs = append(held[1:], r.p), append(qs[1:], enqueueFlow(t, ctx, c, Shell, g))
	}
	drained := hint()
	if !(drained < idleHint) {
		t.Fatalf("hint after draining %v, want < %v before any drain", drained, idleHint)
	}
	var last time.Duration
	for range 20 {
		last = hint()
	}
	if !(last > drained) {
		t.Fatalf("hint after 20 refusals %v, want > %v", last, drained)
	}
	cancel()
	for _, ch := range qs {
		get(t, ch)
	}
	releaseAll(held)
	assertIdle(t, c)
}

// TestServiceWhileAloneCounts: a flow's slot-seconds count while it is the
// only flow with demand. Held alone for 10 s, it later loses a freed slot
// to a flow that has held one for 1 s; not measuring the lone flow's
// service (skipping the clock while no one else is busy) would make them
// even, and the older waiter, the lone flow's, would get the slot.
func TestServiceWhileAloneCounts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lone, other Flow
	}{
		{"principals", flow("a", "1"), flow("b", "1")},
		{"conversations", flow("x", "lone"), flow("x", "other")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := small()
			lim.MaxShell, lim.FlowReserve = 1, 0
			c, clk := fairController(t, lim)
			lone := holdFlow(t, c, Shell, tc.lone, 1)
			clk.add(10 * time.Second)
			lone[0].Release()
			other := holdFlow(t, c, Shell, tc.other, 1)
			clk.add(time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			lq := enqueueFlow(t, ctx, c, Shell, tc.lone)
			oq := enqueueFlow(t, ctx, c, Shell, tc.other)
			other[0].Release()
			r := get(t, oq)
			if r.err != nil {
				t.Fatal(r.err)
			}
			pending(t, lq)
			r.p.Release()
			get(t, lq).p.Release()
			assertIdle(t, c)
		})
	}
}
