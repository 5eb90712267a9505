package admission

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Fair sharing, decided under the controller's lock.
//
// A flow is a conversation within a principal. Capacity comes in three
// pools: control work (any slot; normal work's use of slots is bounded by
// the non-control cap, so control callers share among themselves what they
// ask for), non-control slots (normal and shell) and shell slots (nested in
// the non-control ones). In each pool a principal's share is its max-min
// fair share (water-filling) of the pool less its reserve, over the demands
// (running + queued) of the principals that want it; a conversation's share
// is its max-min fair share of its principal's. Shares are real numbers and
// a flow may start while it holds fewer slots than its share, so a share of
// 2.33 lets a flow hold 3 while the pool's cap allows; the least-served flow
// goes first, which evens out the rounding over time.
//
// The reserve (Limits.FlowReserve, in pools of two slots or more) is what a
// flow that holds nothing in a pool may still use when the others have
// filled their shares: commands are not preempted, so without it a flow
// alone would take every slot and a newcomer would wait for one of its
// commands to end. Within a principal, a conversation holding nothing may
// exceed the principal's share by the reserve (otherwise the conversations
// of one unauthenticated principal, told apart only by their ids, could not
// be protected from each other); minting conversations therefore buys a
// principal at most the reserve beyond its share.
//
// A flow's demand is remembered for demandMemory after it falls, so that a
// conversation that pauses between calls (think time) keeps its share
// instead of losing it to a greedy one at every pause; capacity so held
// back returns when the memory lapses (a timer re-dispatches then).
//
// Nothing here is recomputed over all flows on an acquire or a release:
// shares are water levels over counts of flows by demand, kept as demand
// changes (flowTable), so the work per operation does not grow with the
// number of flows. The dispatcher reads time only through the Clock.

// instant is a time on the controller's clock, as the time since the
// controller's start: plain integer arithmetic on the hot path.
type instant = time.Duration

// demandMemory is how long a flow's recent peak demand still counts.
const demandMemory = time.Second

// Pools a kind occupies.
const (
	poolControl = iota
	poolNonControl
	poolShell
	numPools
)

var (
	controlPools = []int{poolControl}
	normalPools  = []int{poolNonControl}
	shellPools   = []int{poolNonControl, poolShell}
)

func poolsOf(k Kind) []int {
	switch k {
	case Control:
		return controlPools
	case Shell:
		return shellPools
	}
	return normalPools
}

// running is the slots a flow holds, of every kind.
func (f *flowState) running() int { return f.active[poolControl] + f.active[poolNonControl] }

// waiter is one queued operation; its fields are guarded by the
// controller's mutex.
type waiter struct {
	kind Kind
	conv *flowState
	// seq orders waiters by arrival: the clock, read once a tick, would
	// leave the waiters of a tick in a tie.
	seq uint64
	// since is the enqueue time on the system's monotonic clock: what
	// another process sharing the limits compares its waiters with.
	since      int64
	ready      chan struct{} // closed when granted or evicted
	permit     *Permit       // the slot, once granted
	linked     bool          // in its flow's FIFO
	evicted    error         // ErrPreempted or ErrDisplaced: lost its place
	refusal    *Refusal
	stopped    bool // removed from the queue by Stop
	prev, next *waiter
}

// flowList is an intrusive list of flows through one pair of links.
type flowList struct{ head, tail *flowState }

type flowLinks struct {
	prev, next *flowState
	in         bool
}

// linkSet names which of a flow's links a list goes through: a constant
// switch where a function value would cost an indirect call per link.
type linkSet uint8

const (
	busyLinks linkSet = iota
	waitLinks
	lapseLinks
)

func (f *flowState) links(s linkSet) *flowLinks {
	switch s {
	case busyLinks:
		return &f.busyL
	case waitLinks:
		return &f.waitL
	}
	return &f.lapseL
}

func (l *flowList) push(f *flowState, s linkSet) {
	k := f.links(s)
	k.prev, k.next, k.in = l.tail, nil, true
	if l.tail != nil {
		l.tail.links(s).next = f
	} else {
		l.head = f
	}
	l.tail = f
}

func (l *flowList) remove(f *flowState, s linkSet) {
	k := f.links(s)
	if !k.in {
		return
	}
	if k.prev != nil {
		k.prev.links(s).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		k.next.links(s).prev = k.prev
	} else {
		l.tail = k.prev
	}
	k.prev, k.next, k.in = nil, nil, false
}

// demandCount counts flows by effective demand in one pool: how many
// demand each value (clamped to the pool's capacity: no share exceeds it),
// and how many demand anything. The water level of a capacity over the
// flows is computed from it in O(capacity), whatever the number of flows.
type demandCount struct {
	n     []int32 // n[v]: flows demanding v (the last, v or more)
	some  int     // flows demanding at least 1
	sum   int     // their demands (each clamped as counted)
	level float64 // the water level as of the last computation
	x     float64 // ... of this capacity
	dirty bool    // a count changed since
}

func (d *demandCount) init(capacity int) { d.n, d.dirty = make([]int32, capacity+1), true }

func (d *demandCount) move(from, to int) {
	top := len(d.n) - 1
	if from > 0 {
		d.n[min(from, top)]--
		d.some--
		d.sum -= min(from, top)
	}
	if to > 0 {
		d.n[min(to, top)]++
		d.some++
		d.sum += min(to, top)
	}
	d.dirty = true
}

// levelOf is the water level of capacity x over the flows counted: every
// flow gets min(its demand, level) (max-min fairness); +Inf when all are
// met. The result is what waterfill gives the flows it caps.
func (d *demandCount) levelOf(x float64) float64 {
	if !d.dirty && x == d.x {
		return d.level
	}
	d.dirty, d.x, d.level = false, x, math.Inf(1)
	if float64(d.sum) < x {
		return d.level // every demand met: no level to find
	}
	below, n := 0.0, d.some // demands under v, flows demanding v or more
	for v := 1; v < len(d.n) && n > 0; v++ {
		if below+float64(n)*float64(v) >= x {
			d.level = (x - below) / float64(n)
			break
		}
		below += float64(v) * float64(d.n[v])
		n -= int(d.n[v])
	}
	return d.level
}

// flowState is a principal or a conversation.
type flowState struct {
	key       string
	principal *flowState            // a conversation's principal; nil for a principal
	convs     map[string]*flowState // a principal's conversations
	waitConvs flowList              // a principal's conversations with queued operations

	active, queued, peak [numPools]int
	peakUntil            instant
	// eff is the effective demand as counted in the parent's demandCount:
	// the remembered peak while it lasts (the flow is in the lapse list),
	// else the current demand.
	eff    [numPools]int
	lapseL flowLinks // in the table's lapse list, by peakUntil
	busyL  flowLinks // in the busy list (demand now) of its level
	waitL  flowLinks // in the waiting list of its level

	// a principal's conversations
	convDemand [numPools]demandCount
	nbusy      int     // conversations with effective demand
	busyConvs  busySet // conversations with demand now

	served   float64 // slot-seconds held up to servedAt
	servedAt instant
	lastSeen instant

	head, tail *waiter // a conversation's queued operations, oldest first
	nwait      int     // queued operations (a principal: of all its conversations)

	refusedTotal int64
	refusedSec   int64
	refusedWin   [2]int // refusals in refusedSec and the second before
}

func (f *flowState) demand(p int) int { return f.active[p] + f.queued[p] }

// busy is everything a flow runs or queues, of every kind.
func (f *flowState) busy() int { return f.demand(poolControl) + f.demand(poolNonControl) }

func (f *flowState) hasEff() bool { return f.eff != [numPools]int{} }

func (f *flowState) idle(now instant) bool {
	for p := range numPools {
		if f.demand(p) > 0 {
			return false
		}
	}
	return now >= f.peakUntil
}

// servedNow is the service so far, running slots included.
func (f *flowState) servedNow(now instant) float64 {
	r := f.running()
	if r == 0 {
		return f.served // the same as adding 0, without the conversion
	}
	return f.served + float64(r)*(now-f.servedAt).Seconds()
}

func (f *flowState) accrue(now instant) {
	if f.servedAt == now {
		return // nothing to add
	}
	f.served = f.servedNow(now)
	f.servedAt = now
}

// flowTable holds the flows the controller tracks. Everything a decision
// reads is kept up to date as demand changes, in constant work per change:
// the flows counted by effective demand (per pool, principals in the
// table, conversations in their principal), from which a share is one
// water level away; the flows whose remembered demand will lapse, in the
// order it does; the flows with demand now, the peers a flow that wakes up
// is measured against.
type flowTable struct {
	lim        Limits
	capacity   [numPools]int
	reserve    [numPools]int
	principals map[string]*flowState
	waiting    flowList // principals with queued operations
	nconv      int
	overflowed int64
	nextSweep  instant
	fullSweep  instant    // the table was last swept for being full (at most once a second)
	seq        uint64     // waiters queued so far
	lastFlow   Flow       // the flow get returned last ...
	last       *flowState // ... and its conversation, until a sweep

	demand  [numPools]demandCount // principals by effective demand
	lapsing flowList              // flows remembering demand, soonest lapse first
	busyPs  busySet               // principals with demand now
}

func (t *flowTable) init(lim Limits) {
	t.lim = lim
	t.capacity = [numPools]int{lim.MaxActive, lim.MaxNonControl(), lim.MaxShell}
	for p, n := range t.capacity {
		if n >= 2 {
			t.reserve[p] = min(lim.FlowReserve, n-1)
		}
		t.demand[p].init(n)
	}
	t.principals = map[string]*flowState{}
}

// overflowBuckets is how many shared flows take the flows past the cap.
const overflowBuckets = 16

var bucketKeys = func() (k [overflowBuckets]string) {
	for i := range k {
		k[i] = "~overflow-" + strconv.Itoa(i)
	}
	return k
}()

// bucketKey is the shared flow a key goes to past the cap (FNV-1a, by
// hand: no allocation on a path every new id of a flood takes).
func bucketKey(key string) string {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return bucketKeys[h%overflowBuckets]
}

// get returns the conversation state of f, creating what is missing.
func (t *flowTable) get(f Flow, now instant) *flowState {
	if now >= t.nextSweep {
		t.sweep(now)
	}
	if t.last != nil && f == t.lastFlow {
		// The same flow again (a caller's calls come in runs): no lookup.
		t.last.lastSeen, t.last.principal.lastSeen = now, now
		return t.last
	}
	var p *flowState
	if t.last != nil && f.Principal == t.lastFlow.Principal {
		p = t.last.principal // another conversation of the same principal
	} else {
		p = t.principals[f.Principal]
	}
	if p == nil {
		key := f.Principal
		if len(t.principals) >= t.lim.MaxFlows {
			t.sweepFull(now)
		}
		if len(t.principals) >= t.lim.MaxFlows {
			key = bucketKey(key)
			t.overflowed++
		}
		if p = t.principals[key]; p == nil {
			p = &flowState{key: key, convs: map[string]*flowState{}, servedAt: now}
			for pool, n := range t.capacity {
				p.convDemand[pool].init(n)
			}
			t.principals[key] = p
		}
	}
	p.lastSeen = now
	c := p.convs[f.Conversation]
	if c == nil {
		key := f.Conversation
		if t.nconv >= t.lim.MaxFlows {
			t.sweepFull(now)
		}
		if t.nconv >= t.lim.MaxFlows {
			key = bucketKey(key)
			t.overflowed++
		}
		if c = p.convs[key]; c == nil {
			c = &flowState{key: key, principal: p, servedAt: now}
			p.convs[key] = c
			t.nconv++
		}
	}
	c.lastSeen = now
	if c.key == f.Conversation && p.key == f.Principal {
		// Not a bucket: a flow in a bucket counts as overflowed each time.
		t.lastFlow, t.last = f, c
	}
	return c
}

// sweepFull sweeps a full table, at most once a second: until then new
// flows share buckets, so a stream of new ids costs no sweep each.
func (t *flowTable) sweepFull(now instant) {
	if now < t.fullSweep {
		return
	}
	t.fullSweep = now + time.Second
	t.sweep(now)
}

// sweep forgets flows idle for longer than FlowIdle. An idle flow counts
// in no demand and is in no list (expire ran first).
func (t *flowTable) sweep(now instant) {
	t.nextSweep = now + t.lim.FlowIdle/4
	t.last = nil // it may be forgotten, or a bucket's flow get a place
	for pk, p := range t.principals {
		for ck, c := range p.convs {
			if c.idle(now) && !c.hasEff() && now-c.lastSeen > t.lim.FlowIdle {
				delete(p.convs, ck)
				t.nconv--
			}
		}
		if len(p.convs) == 0 && p.idle(now) && !p.hasEff() && now-p.lastSeen > t.lim.FlowIdle {
			delete(t.principals, pk)
		}
	}
}

// setEff sets a flow's effective demand in pool, moving it in its level's
// count.
func (t *flowTable) setEff(f *flowState, pool, v int) {
	old := f.eff[pool]
	if old == v {
		return
	}
	had := f.hasEff()
	f.eff[pool] = v
	if p := f.principal; p != nil {
		p.convDemand[pool].move(old, v)
		if has := f.hasEff(); has != had {
			if has {
				p.nbusy++
			} else {
				p.nbusy--
			}
		}
		return
	}
	t.demand[pool].move(old, v)
}

// remember records an arrival in f's remembered demand: the peak since the
// memory last lapsed, kept for demandMemory from now.
func (t *flowTable) remember(f *flowState, now instant) {
	until := now + demandMemory
	in := f.lapseL.in
	if !in {
		f.peak = [numPools]int{}
	} else if next := f.lapseL.next; next != nil && next.peakUntil != until {
		// Listed lapses are never after until (now does not go back), so
		// f keeps its place only when nothing after it lapses sooner.
		t.lapsing.remove(f, lapseLinks)
		in = false
	}
	for pool := range numPools {
		f.peak[pool] = max(f.peak[pool], f.demand(pool))
		if f.eff[pool] != f.peak[pool] { // mostly not: spare the call
			t.setEff(f, pool, f.peak[pool])
		}
	}
	f.peakUntil = until
	if !in {
		t.lapsing.push(f, lapseLinks)
	}
}

// fell updates f's effective demand after its demand fell: while the
// memory lasts the peak still counts.
// The check is apart from the work so that it inlines: on the hot path
// the memory mostly lasts.
func (t *flowTable) fell(f *flowState) {
	if !f.lapseL.in {
		t.demandNow(f)
	}
}

// demandNow makes f's demand now its effective demand.
func (t *flowTable) demandNow(f *flowState) {
	for pool := range numPools {
		t.setEff(f, pool, f.demand(pool))
	}
}

// expire lets the remembered demand lapse that has: O(1) per lapse, and
// the decisions read the shares as of now. Every lock runs it, and mostly
// nothing has lapsed: the check inlines, the work does not.
func (t *flowTable) expire(now instant) {
	if f := t.lapsing.head; f != nil && now >= f.peakUntil {
		t.expireFrom(now)
	}
}

func (t *flowTable) expireFrom(now instant) {
	for f := t.lapsing.head; f != nil && now >= f.peakUntil; f = t.lapsing.head {
		t.lapsing.remove(f, lapseLinks)
		t.demandNow(f)
	}
}

// lapse is when the soonest remembered demand lapses; false when none is
// remembered.
func (t *flowTable) lapse() (instant, bool) {
	if f := t.lapsing.head; f != nil {
		return f.peakUntil, true
	}
	return 0, false
}

// busySet is the flows with demand now among a set of peers (the
// principals; a principal's conversations), and the least service among
// them.
//
// The least is kept for the instant it was found at: at one instant a
// flow's service does not change (its slots change the rate, not the
// amount so far), a flow that joins joins at the least or above, and so
// only the leaving of the last flow at the least changes it; ties counts
// them. On the real clock an instant lasts a tick, over which many flows
// come and go: they scan the set once, not once each.
type busySet struct {
	list flowList
	last float64 // the least as last seen (also once none is left)
	min  float64 // the least at the instant at, if known
	at   instant
	ties int // flows at min
	// known: min is the least now, at at (else it is found again)
	known bool
}

// activate starts a flow that had no demand at the least service among its
// peers with demand now (the last seen when none has), so that time spent
// idle is not banked as a claim on the future, and adds it to the peers.
// Called before its demand rises from zero.
func (b *busySet) activate(f *flowState, now instant) {
	if !b.known || b.at != now {
		b.known = false
		for q := b.list.head; q != nil; q = q.busyL.next {
			switch s := q.servedNow(now); {
			case !b.known || s < b.min:
				b.min, b.ties, b.known, b.at = s, 1, true, now
			case s == b.min:
				b.ties++
			}
		}
	}
	if b.known {
		b.last = b.min
	}
	f.accrue(now)
	f.served = max(f.served, b.last)
	switch {
	case !b.known: // f is the only one
		b.min, b.ties, b.known, b.at = f.served, 1, true, now
	case f.served == b.min:
		b.ties++
	}
	b.list.push(f, busyLinks)
}

// idle takes f, whose demand is gone, out of the peers.
func (b *busySet) idle(f *flowState, now instant) {
	if b.known && (b.at != now || f.servedNow(now) <= b.min) {
		if b.ties--; b.at != now || b.ties <= 0 {
			b.known = false
		}
	}
	b.list.remove(f, busyLinks)
}

// arrive counts one more operation of kind k of conversation c, as queued.
func (t *flowTable) arrive(c *flowState, k Kind, now instant) {
	p := c.principal
	if c.busy() == 0 {
		p.busyConvs.activate(c, now)
	}
	if p.busy() == 0 {
		t.busyPs.activate(p, now)
	}
	for _, pool := range poolsOf(k) {
		c.queued[pool]++
		p.queued[pool]++
	}
	// The principal first: listed just before it, c then keeps its place.
	t.remember(p, now)
	t.remember(c, now)
}

// leave takes one queued operation of kind k of c out of the demand.
func (t *flowTable) leave(c *flowState, k Kind, now instant) {
	p := c.principal
	for _, pool := range poolsOf(k) {
		c.queued[pool]--
		p.queued[pool]--
	}
	t.fell(c)
	t.fell(p)
	t.idled(c, now)
}

// idled takes c, and its principal, out of the busy lists when their
// demand is gone.
func (t *flowTable) idled(c *flowState, now instant) {
	p := c.principal
	if c.busy() == 0 && c.busyL.in {
		p.busyConvs.idle(c, now)
	}
	if p.busy() == 0 && p.busyL.in {
		t.busyPs.idle(p, now)
	}
}

func (t *flowTable) queue(w *waiter) {
	c := w.conv
	t.seq++
	w.seq = t.seq
	w.since = monoNow()
	w.prev, w.next = c.tail, nil
	if c.tail != nil {
		c.tail.next = w
	} else {
		c.head = w
	}
	c.tail = w
	w.linked = true
	c.nwait++
	c.principal.nwait++
	if !c.waitL.in {
		c.principal.waitConvs.push(c, waitLinks)
	}
	if !c.principal.waitL.in {
		t.waiting.push(c.principal, waitLinks)
	}
}

func (t *flowTable) unlink(w *waiter) {
	if !w.linked {
		return
	}
	c := w.conv
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		c.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		c.tail = w.prev
	}
	w.prev, w.next, w.linked = nil, nil, false
	c.nwait--
	c.principal.nwait--
	if c.nwait == 0 {
		c.principal.waitConvs.remove(c, waitLinks)
	}
	if c.principal.nwait == 0 {
		t.waiting.remove(c.principal, waitLinks)
	}
}

// dequeue takes w out: its demand and its place.
func (t *flowTable) dequeue(w *waiter, now instant) {
	t.unlink(w)
	t.leave(w.conv, w.kind, now)
}

// start turns a queued operation of kind k of c into a running slot; the
// demand stays as it was.
func (t *flowTable) start(c *flowState, k Kind, now instant) {
	p := c.principal
	c.accrue(now)
	p.accrue(now)
	for _, pool := range poolsOf(k) {
		c.queued[pool]--
		p.queued[pool]--
		c.active[pool]++
		p.active[pool]++
	}
}

// finish frees a running slot of kind k of conversation c.
func (t *flowTable) finish(c *flowState, k Kind, now instant) {
	p := c.principal
	c.accrue(now)
	p.accrue(now)
	for _, pool := range poolsOf(k) {
		c.active[pool]--
		p.active[pool]--
	}
	// fell, by hand: it does not inline, and mostly the memory lasts.
	if !c.lapseL.in {
		t.demandNow(c)
	}
	if !p.lapseL.in {
		t.demandNow(p)
	}
	t.idled(c, now)
}

// waterfill returns the max-min fair allocation of capacity among demands.
// The dispatcher keeps the same allocation as water levels (demandCount);
// this is its reference.
func waterfill(capacity float64, demands []int) []float64 {
	out := make([]float64, len(demands))
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return demands[a] - demands[b] })
	left := capacity
	for n, i := range idx {
		fair := left / float64(len(idx)-n)
		d := float64(demands[i])
		if d <= fair {
			out[i] = d
		} else {
			out[i] = fair
		}
		left -= out[i]
	}
	return out
}

// principalShare is p's max-min fair share of pool (less its reserve).
func (t *flowTable) principalShare(p *flowState, pool int) float64 {
	l := t.demand[pool].levelOf(float64(t.capacity[pool] - t.reserve[pool]))
	return min(float64(p.eff[pool]), l)
}

// convShare is c's max-min fair share of its principal's share of pool.
func (t *flowTable) convShare(c *flowState, pool int, pshare float64) float64 {
	l := c.principal.convDemand[pool].levelOf(pshare)
	return min(float64(c.eff[pool]), l)
}

// usage is a snapshot of the slots held and the places queued: the
// dispatcher decides over it, not over the controller's live word. It is
// the word itself, its fields read as asked: a struct of them, built and
// copied on every call, cost more than the decision.
type usage uint64

func usageOf(s uint64) usage { return usage(s) }

// total is the slots held, of every kind.
func (u usage) total() int { return field(uint64(u), shTotal) }

// used is the slots held in pool (control: by control work).
func (u usage) used(pool int) int {
	switch pool {
	case poolControl:
		return field(uint64(u), shTotal) - field(uint64(u), shNonControl)
	case poolNonControl:
		return field(uint64(u), shNonControl)
	}
	return field(uint64(u), shShell)
}

// queuedControl and queued are the places held by control and by other
// work.
func (u usage) queuedControl() int { return field(uint64(u), shQControl) }
func (u usage) queued() int        { return field(uint64(u), shQNormal) }

// fits reports whether an operation of kind k fits the global caps.
func (t *flowTable) fits(u usage, k Kind) bool {
	if u.total() >= t.lim.MaxActive {
		return false
	}
	if k == Control {
		return true
	}
	if u.used(poolNonControl) >= t.lim.MaxNonControl() {
		return false
	}
	return k != Shell || u.used(poolShell) < t.lim.MaxShell
}

// mayStart reports whether conversation conv may start an operation of
// kind k now under its shares, with u held (the caller checks the global
// caps). The operation's demand is already counted.
func (t *flowTable) mayStart(u usage, conv *flowState, k Kind) bool {
	p := conv.principal
	for _, pool := range poolsOf(k) {
		n, h := t.capacity[pool], t.reserve[pool]
		ps := t.principalShare(p, pool)
		// A conversation holding nothing in the pool is always under its
		// share (its demand, this call, is at least one); only one that
		// holds something needs its share computed.
		// Nor does one below an equal split of its principal's share:
		// water-filling gives every conversation at least that much of
		// what it asks.
		if conv.active[pool] > 0 && float64(conv.active[pool]+1)*float64(p.nbusy) > ps {
			if float64(conv.active[pool]) >= t.convShare(conv, pool, ps) {
				return false
			}
		}
		pa := float64(p.active[pool])
		inShare := pa < ps && (u.used(pool) < n-h || p.active[pool] == 0)
		newcomer := conv.active[pool] == 0 && pa < ps+float64(h) && u.used(pool) < n
		if !inShare && !newcomer {
			return false
		}
	}
	return true
}

// pick returns the next waiter to grant with u held: control first; the
// least-served principal, then conversation, with a waiter that may start;
// its oldest such waiter (ties go to the oldest). nil when none may start.
func (t *flowTable) pick(u usage, now instant) *waiter {
	for _, control := range []bool{true, false} {
		if control && u.queuedControl() == 0 || !control && u.queued() == 0 {
			continue
		}
		var best *waiter
		var bestServed float64
		for p := t.waiting.head; p != nil; p = p.waitL.next {
			ps := p.servedNow(now)
			if best != nil && ps > bestServed {
				continue // cannot win: spare its candidate's checks
			}
			w := t.pickIn(p, control, u, now)
			if w == nil {
				continue
			}
			if best == nil || ps < bestServed || (ps == bestServed && w.seq < best.seq) {
				best, bestServed = w, ps
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// pickIn is principal p's candidate: the oldest startable waiter of its
// least-served conversation that has one.
func (t *flowTable) pickIn(p *flowState, control bool, u usage, now instant) *waiter {
	var best *waiter
	var bestServed float64
	for conv := p.waitConvs.head; conv != nil; conv = conv.waitL.next {
		cs := conv.servedNow(now)
		if best != nil && cs > bestServed {
			continue
		}
		// Whether a waiter may start depends on its kind only, not on
		// the waiter: each kind is judged once per conversation, so a
		// long queue of one kind costs one judgement.
		var judged, refused [Control + 1]bool
		for w := conv.head; w != nil; w = w.next {
			k := w.kind
			if (k == Control) != control || refused[k] {
				continue
			}
			if !judged[k] {
				judged[k] = true
				if !t.fits(u, k) || !t.mayStart(u, conv, k) {
					refused[k] = true
					if control || refused[Normal] && refused[Shell] {
						break // no kind left that may start
					}
					continue
				}
			}
			if best == nil || cs < bestServed || w.seq < best.seq {
				best, bestServed = w, cs
			}
			break
		}
	}
	return best
}

// victim decides, at a full queue, whose place an arrival of kind k from
// conv takes: the
// youngest operation of the conversation holding the most places of the
// principal holding the most, when that principal holds at least two more
// places than w's (or, within w's principal, that conversation two more
// than w's), so that a swap always evens places out. Otherwise it returns
// nil and the scope of the refusal w gets.
func (t *flowTable) victim(conv *flowState, k Kind) (*waiter, Scope) {
	p := conv.principal
	mine := p.nwait
	var top *flowState
	for q := t.waiting.head; q != nil; q = q.waitL.next {
		if q != p && (top == nil || q.nwait > top.nwait) {
			top = q
		}
	}
	if top != nil && top.nwait > mine+1 {
		return youngest(busiestConv(top, nil), k), ""
	}
	topConv := busiestConv(p, conv)
	if topConv != nil && topConv.nwait > conv.nwait+1 {
		return youngest(topConv, k), ""
	}
	switch {
	case top != nil && top.nwait >= mine:
		return nil, ScopeServer
	case topConv != nil && topConv.nwait > conv.nwait:
		return nil, ScopePrincipal
	case mine == 0:
		return nil, ScopeServer
	}
	return nil, ScopeConversation
}

// normalVictim is the youngest normal operation of the flow holding the
// most normal places: the place a control arrival takes at a full queue.
// Among flows holding as many, the youngest operation goes.
func (t *flowTable) normalVictim() *waiter {
	most := 0
	for q := t.waiting.head; q != nil; q = q.waitL.next {
		most = max(most, q.queued[poolNonControl])
	}
	if most == 0 {
		return nil
	}
	var best *waiter
	for q := t.waiting.head; q != nil; q = q.waitL.next {
		if q.queued[poolNonControl] != most {
			continue
		}
		cmost := 0
		for c := q.waitConvs.head; c != nil; c = c.waitL.next {
			cmost = max(cmost, c.queued[poolNonControl])
		}
		for c := q.waitConvs.head; c != nil; c = c.waitL.next {
			if c.queued[poolNonControl] != cmost {
				continue
			}
			if w := youngest(c, Normal); w != nil && w.kind != Control && (best == nil || w.seq > best.seq) {
				best = w
			}
		}
	}
	return best
}

// busiestConv is the conversation of p holding the most places, except
// one; among those holding as many, the one with the youngest operation.
func busiestConv(p *flowState, except *flowState) *flowState {
	var top *flowState
	for c := p.waitConvs.head; c != nil; c = c.waitL.next {
		if c == except {
			continue
		}
		if top == nil || c.nwait > top.nwait || (c.nwait == top.nwait && c.tail.seq > top.tail.seq) {
			top = c
		}
	}
	return top
}

// youngest is a flow's most recently queued operation, a non-control one
// when the arrival is non-control and the flow has one.
func youngest(c *flowState, k Kind) *waiter {
	if k != Control {
		for w := c.tail; w != nil; w = w.prev {
			if w.kind != Control {
				return w
			}
		}
	}
	return c.tail
}

// refused counts a refusal of conv and returns its refusals over the last
// two seconds.
func (t *flowTable) refused(conv *flowState, now instant) int {
	sec := int64(now / time.Second)
	for _, f := range []*flowState{conv, conv.principal} {
		switch {
		case sec == f.refusedSec:
		case sec == f.refusedSec+1:
			f.refusedWin = [2]int{0, f.refusedWin[0]}
		default:
			f.refusedWin = [2]int{}
		}
		f.refusedSec = sec
		f.refusedWin[0]++
		f.refusedTotal++
	}
	return conv.refusedWin[0] + conv.refusedWin[1]
}

func (t *flowTable) allWaiters() []*waiter {
	var ws []*waiter
	for p := t.waiting.head; p != nil; p = p.waitL.next {
		for c := p.waitConvs.head; c != nil; c = c.waitL.next {
			for w := c.head; w != nil; w = w.next {
				ws = append(ws, w)
			}
		}
	}
	slices.SortFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	return ws
}

// drainMeter counts completions per pool over the last seconds: the drain
// rate a Retry-After estimate is made from.
type drainMeter struct {
	sec   [numPools][drainWindow]int64 // the second each bucket counts
	count [numPools][drainWindow]int
}

const drainWindow = 5

func (d *drainMeter) note(k Kind, now instant) {
	sec := int64(now / time.Second)
	i := int(sec % drainWindow)
	for _, p := range poolsOf(k) {
		if d.sec[p][i] != sec {
			d.sec[p][i], d.count[p][i] = sec, 0
		}
		d.count[p][i]++
	}
}

// rate is the completions per second of the narrowest pool k uses.
func (d *drainMeter) rate(k Kind, now instant) float64 {
	pools := poolsOf(k)
	p := pools[len(pools)-1]
	sec := int64(now / time.Second)
	n := 0
	for i := range drainWindow {
		if sec-d.sec[p][i] < drainWindow {
			n += d.count[p][i]
		}
	}
	return float64(n) / drainWindow
}

// principalName is how /metrics names a principal: the part of its key
// after the kind, which the caller made a pseudonym (caller.Keys).
func principalName(key string) string {
	if _, name, ok := strings.Cut(key, ":"); ok {
		return name
	}
	return key
}

// principalKind is the kind prefix of a caller.Principal key ("oauth:...").
func principalKind(key string) string {
	if k, _, ok := strings.Cut(key, ":"); ok {
		return k
	}
	if strings.HasPrefix(key, "~overflow-") {
		return "overflow"
	}
	return "anonymous"
}
