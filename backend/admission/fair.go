package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
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
	kind       Kind
	conv       *flowState
	at         time.Time
	ready      chan struct{} // closed when granted or evicted
	granted    bool
	linked     bool  // in its flow's FIFO
	evicted    error // ErrPreempted or ErrDisplaced: lost its place
	refusal    *Refusal
	stopped    bool // removed from the queue by Stop
	prev, next *waiter
}

// flowState is a principal or a conversation.
type flowState struct {
	key       string
	principal *flowState              // a conversation's principal; nil for a principal
	convs     map[string]*flowState   // a principal's conversations
	busyConvs map[*flowState]struct{} // ... with demand or remembered demand
	waitConvs map[*flowState]struct{} // ... with queued operations
	convStale bool                    // the conversations' shares must be computed again
	minConv   float64                 // least service of its busy conversations, as of the last computation

	active, queued, peak [numPools]int
	peakUntil            time.Time
	share                [numPools]float64 // as of the last computeShares

	served   float64 // slot-seconds held up to servedAt
	servedAt time.Time
	lastSeen time.Time

	head, tail *waiter // a conversation's queued operations, oldest first
	nwait      int     // queued operations (a principal: of all its conversations)

	refusedTotal int64
	refusedSec   int64
	refusedWin   [2]int // refusals in refusedSec and the second before
}

func (f *flowState) demand(p int) int { return f.active[p] + f.queued[p] }

// busy is everything a flow runs or queues, of every kind.
func (f *flowState) busy() int { return f.demand(poolControl) + f.demand(poolNonControl) }

// effDemand is the demand shares are computed from: the current one, or the
// remembered peak while it lasts.
func (f *flowState) effDemand(p int, now time.Time) int {
	d := f.demand(p)
	if now.Before(f.peakUntil) && f.peak[p] > d {
		return f.peak[p]
	}
	return d
}

func (f *flowState) idle(now time.Time) bool {
	for p := range numPools {
		if f.demand(p) > 0 {
			return false
		}
	}
	return !now.Before(f.peakUntil)
}

// servedNow is the service so far, running slots included.
func (f *flowState) servedNow(now time.Time) float64 {
	return f.served + float64(f.running())*now.Sub(f.servedAt).Seconds()
}

func (f *flowState) accrue(now time.Time) {
	f.served = f.servedNow(now)
	f.servedAt = now
}

// flowTable holds the flows the controller tracks.
type flowTable struct {
	lim        Limits
	capacity   [numPools]int
	reserve    [numPools]int
	principals map[string]*flowState
	busy       map[*flowState]struct{} // principals with demand, or remembered demand
	waiting    map[*flowState]struct{} // principals with queued operations
	nconv      int
	overflowed int64
	nextSweep  time.Time
	fullSweep  time.Time // the table was last swept for being full (at most once a second)
	stale      bool      // the principals' shares must be computed again
	lapse      time.Time // the earliest remembered demand that holds shares back
	minP       float64   // least service of the busy principals, as of the last computation

	// scratch space of computeShares, kept to spare allocations
	ps            []*flowState
	demands       []int
	convScratch   []*flowState
	demandScratch []int
}

func (t *flowTable) init(lim Limits) {
	t.lim = lim
	t.capacity = [numPools]int{lim.MaxActive, lim.MaxNonControl(), lim.MaxShell}
	for p, n := range t.capacity {
		if n >= 2 {
			t.reserve[p] = min(lim.FlowReserve, n-1)
		}
	}
	t.principals = map[string]*flowState{}
	t.busy = map[*flowState]struct{}{}
	t.waiting = map[*flowState]struct{}{}
	t.stale = true
}

// overflowBuckets is how many shared flows take the flows past the cap.
const overflowBuckets = 16

func bucketKey(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return "~overflow-" + strconv.Itoa(int(h.Sum32()%overflowBuckets))
}

// get returns the conversation state of f, creating what is missing.
func (t *flowTable) get(f Flow, now time.Time) *flowState {
	if !now.Before(t.nextSweep) {
		t.sweep(now)
	}
	p := t.principals[f.Principal]
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
			p = &flowState{key: key, convs: map[string]*flowState{}, busyConvs: map[*flowState]struct{}{}, waitConvs: map[*flowState]struct{}{}, servedAt: now}
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
	return c
}

// sweepFull sweeps a full table, at most once a second: until then new
// flows share buckets, so a stream of new ids costs no sweep each.
func (t *flowTable) sweepFull(now time.Time) {
	if now.Before(t.fullSweep) {
		return
	}
	t.fullSweep = now.Add(time.Second)
	t.sweep(now)
}

// sweep forgets flows idle for longer than FlowIdle.
func (t *flowTable) sweep(now time.Time) {
	t.nextSweep = now.Add(t.lim.FlowIdle / 4)
	for pk, p := range t.principals {
		for ck, c := range p.convs {
			if c.idle(now) && now.Sub(c.lastSeen) > t.lim.FlowIdle {
				delete(p.convs, ck)
				delete(p.busyConvs, c)
				t.nconv--
			}
		}
		if len(p.convs) == 0 && p.idle(now) && now.Sub(p.lastSeen) > t.lim.FlowIdle {
			delete(t.principals, pk)
			delete(t.busy, p)
		}
	}
}

// activate starts a flow that had no demand at the least service among its
// busy peers (as of the last share computation), so that time spent idle is
// not banked as a claim on the future. Called before its demand rises from
// zero.
func activate(f *flowState, least float64, now time.Time) {
	f.accrue(now)
	f.served = max(f.served, least)
}

func (t *flowTable) addDemand(w *waiter, delta int, now time.Time) {
	c, p := w.conv, w.conv.principal
	if delta > 0 {
		if c.busy() == 0 {
			activate(c, p.minConv, now)
		}
		if p.busy() == 0 {
			activate(p, t.minP, now)
		}
	}
	for _, pool := range poolsOf(w.kind) {
		c.queued[pool] += delta
		p.queued[pool] += delta
	}
	if delta > 0 {
		for _, f := range []*flowState{c, p} {
			if !now.Before(f.peakUntil) {
				f.peak = [numPools]int{}
			}
			for pool := range numPools {
				f.peak[pool] = max(f.peak[pool], f.demand(pool))
			}
			f.peakUntil = now.Add(demandMemory)
		}
		p.busyConvs[c] = struct{}{}
		t.busy[p] = struct{}{}
	}
	t.stale = true
	p.convStale = true
}

// enqueue counts w's demand (as queued) in its flow; queue links it.
func (t *flowTable) enqueue(w *waiter, now time.Time) { t.addDemand(w, 1, now) }

func (t *flowTable) queue(w *waiter) {
	c := w.conv
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
	c.principal.waitConvs[c] = struct{}{}
	t.waiting[c.principal] = struct{}{}
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
		delete(c.principal.waitConvs, c)
	}
	if c.principal.nwait == 0 {
		delete(t.waiting, c.principal)
	}
}

// dequeue takes w out: its demand and its place.
func (t *flowTable) dequeue(w *waiter, now time.Time) {
	t.unlink(w)
	t.addDemand(w, -1, now)
}

// start turns w's queued demand into a running slot.
func (t *flowTable) start(w *waiter, now time.Time) {
	t.unlink(w)
	c, p := w.conv, w.conv.principal
	c.accrue(now)
	p.accrue(now)
	for _, pool := range poolsOf(w.kind) {
		c.queued[pool]--
		p.queued[pool]--
		c.active[pool]++
		p.active[pool]++
	}
}

// finish frees a running slot of kind k of conversation c.
func (t *flowTable) finish(c *flowState, k Kind, now time.Time) {
	p := c.principal
	c.accrue(now)
	p.accrue(now)
	for _, pool := range poolsOf(k) {
		c.active[pool]--
		p.active[pool]--
	}
	t.stale = true
	p.convStale = true
}

// waterfill returns the max-min fair allocation of capacity among demands.
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

// computeShares sets every busy principal's share of every pool from the
// principals' effective demands, and notes when the earliest remembered
// demand lapses. It costs O(busy principals); conversations' shares within
// a principal are computed when first needed (convShares).
func (t *flowTable) computeShares(now time.Time) {
	t.stale = false
	t.lapse = time.Time{}
	ps := t.ps[:0]
	first := true
	for p := range t.busy {
		if p.idle(now) {
			delete(t.busy, p)
			clear(p.busyConvs)
			continue
		}
		ps = append(ps, p)
		p.convStale = true
		if s := p.servedNow(now); p.busy() > 0 && (first || s < t.minP) {
			t.minP, first = s, false
		}
		t.noteLapse(p, now)
	}
	t.ps = ps
	for pool := range numPools {
		demands := t.demands[:0]
		for _, p := range ps {
			demands = append(demands, p.effDemand(pool, now))
		}
		t.demands = demands
		for i, s := range waterfill(float64(t.capacity[pool]-t.reserve[pool]), demands) {
			ps[i].share[pool] = s
		}
	}
}

func (t *flowTable) noteLapse(f *flowState, now time.Time) {
	for pool := range numPools {
		if f.effDemand(pool, now) > f.demand(pool) && (t.lapse.IsZero() || f.peakUntil.Before(t.lapse)) {
			t.lapse = f.peakUntil
		}
	}
}

// convShares sets the shares of p's busy conversations within p's share.
// Caller has computed the principals' shares.
func (t *flowTable) convShares(p *flowState, now time.Time) {
	if !p.convStale {
		return
	}
	p.convStale = false
	convs := t.convScratch[:0]
	first := true
	for c := range p.busyConvs {
		if c.idle(now) {
			delete(p.busyConvs, c)
			continue
		}
		convs = append(convs, c)
		if s := c.servedNow(now); c.busy() > 0 && (first || s < p.minConv) {
			p.minConv, first = s, false
		}
		t.noteLapse(c, now)
	}
	t.convScratch = convs
	cd := slices.Grow(t.demandScratch[:0], len(convs))[:len(convs)]
	t.demandScratch = cd
	for pool := range numPools {
		for i, c := range convs {
			cd[i] = c.effDemand(pool, now)
		}
		for i, s := range waterfill(p.share[pool], cd) {
			convs[i].share[pool] = s
		}
	}
}

// usage is a snapshot of the slots held and the places queued: the
// dispatcher decides over it, not over the controller's live word.
type usage struct {
	total                 int           // slots held, of every kind
	used                  [numPools]int // slots held per pool (control: by control work)
	queuedControl, queued int           // places held by control and by other work
}

func usageOf(s uint64) usage {
	return usage{
		total:         field(s, shTotal),
		used:          [numPools]int{field(s, shTotal) - field(s, shNonControl), field(s, shNonControl), field(s, shShell)},
		queuedControl: field(s, shQControl),
		queued:        field(s, shQNormal),
	}
}

// fits reports whether an operation of kind k fits the global caps.
func (t *flowTable) fits(u usage, k Kind) bool {
	if u.total >= t.lim.MaxActive {
		return false
	}
	if k == Control {
		return true
	}
	if u.used[poolNonControl] >= t.lim.MaxNonControl() {
		return false
	}
	return k != Shell || u.used[poolShell] < t.lim.MaxShell
}

// mayStart reports whether w's flow may start w now under its shares, with
// u held (the caller checks the global caps).
func (t *flowTable) mayStart(u usage, w *waiter, now time.Time) bool {
	if t.stale {
		t.computeShares(now)
	}
	conv, p := w.conv, w.conv.principal
	for _, pool := range poolsOf(w.kind) {
		n, h := t.capacity[pool], t.reserve[pool]
		// A conversation holding nothing in the pool is always under its
		// share (its demand, this call, is at least one); only one that
		// holds something needs its share computed.
		// Nor does one below an equal split of its principal's share:
		// water-filling gives every conversation at least that much of
		// what it asks.
		if conv.active[pool] > 0 && float64(conv.active[pool]+1)*float64(len(p.busyConvs)) > p.share[pool] {
			t.convShares(p, now)
			if float64(conv.active[pool]) >= conv.share[pool] {
				return false
			}
		}
		pa, ps := float64(p.active[pool]), p.share[pool]
		inShare := pa < ps && (u.used[pool] < n-h || p.active[pool] == 0)
		newcomer := conv.active[pool] == 0 && pa < ps+float64(h) && u.used[pool] < n
		if !inShare && !newcomer {
			return false
		}
	}
	return true
}

// pick returns the next waiter to grant with u held: control first; the
// least-served principal, then conversation, with a waiter that may start;
// its oldest such waiter (ties go to the oldest). nil when none may start.
func (t *flowTable) pick(u usage, now time.Time) *waiter {
	for _, control := range []bool{true, false} {
		if control && u.queuedControl == 0 || !control && u.queued == 0 {
			continue
		}
		var best *waiter
		var bestServed float64
		for p := range t.waiting {
			w := t.pickIn(p, control, u, now)
			if w == nil {
				continue
			}
			if ps := p.servedNow(now); best == nil || ps < bestServed || (ps == bestServed && w.at.Before(best.at)) {
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
func (t *flowTable) pickIn(p *flowState, control bool, u usage, now time.Time) *waiter {
	var best *waiter
	var bestServed float64
	for conv := range p.waitConvs {
		cs := conv.servedNow(now)
		if best != nil && cs > bestServed {
			continue
		}
		for w := conv.head; w != nil; w = w.next {
			if (w.kind == Control) != control || !t.fits(u, w.kind) || !t.mayStart(u, w, now) {
				continue
			}
			if best == nil || cs < bestServed || w.at.Before(best.at) {
				best, bestServed = w, cs
			}
			break
		}
	}
	return best
}

// victim decides, at a full queue, whose place an arrival w takes: the
// youngest operation of the conversation holding the most places of the
// principal holding the most, when that principal holds at least two more
// places than w's (or, within w's principal, that conversation two more
// than w's), so that a swap always evens places out. Otherwise it returns
// nil and the scope of the refusal w gets.
func (t *flowTable) victim(w *waiter, _ time.Time) (*waiter, Scope) {
	conv, p := w.conv, w.conv.principal
	mine := p.nwait
	var top *flowState
	for q := range t.waiting {
		if q != p && (top == nil || q.nwait > top.nwait) {
			top = q
		}
	}
	if top != nil && top.nwait > mine+1 {
		return youngest(busiestConv(top, nil), w.kind), ""
	}
	topConv := busiestConv(p, conv)
	if topConv != nil && topConv.nwait > conv.nwait+1 {
		return youngest(topConv, w.kind), ""
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
	for q := range t.waiting {
		most = max(most, q.queued[poolNonControl])
	}
	if most == 0 {
		return nil
	}
	var best *waiter
	for q := range t.waiting {
		if q.queued[poolNonControl] != most {
			continue
		}
		cmost := 0
		for c := range q.waitConvs {
			cmost = max(cmost, c.queued[poolNonControl])
		}
		for c := range q.waitConvs {
			if c.queued[poolNonControl] != cmost {
				continue
			}
			if w := youngest(c, Normal); w != nil && w.kind != Control && (best == nil || w.at.After(best.at)) {
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
	for c := range p.waitConvs {
		if c == except {
			continue
		}
		if top == nil || c.nwait > top.nwait || (c.nwait == top.nwait && c.tail.at.After(top.tail.at)) {
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
func (t *flowTable) refused(conv *flowState, now time.Time) int {
	sec := now.Unix()
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
	for p := range t.waiting {
		for c := range p.waitConvs {
			for w := c.head; w != nil; w = w.next {
				ws = append(ws, w)
			}
		}
	}
	slices.SortFunc(ws, func(a, b *waiter) int { return a.at.Compare(b.at) })
	return ws
}

// drainMeter counts completions per pool over the last seconds: the drain
// rate a Retry-After estimate is made from.
type drainMeter struct {
	sec   [numPools][drainWindow]int64 // the second each bucket counts
	count [numPools][drainWindow]int
}

const drainWindow = 5

func (d *drainMeter) note(k Kind, now time.Time) {
	sec := now.Unix()
	i := int(sec % drainWindow)
	for _, p := range poolsOf(k) {
		if d.sec[p][i] != sec {
			d.sec[p][i], d.count[p][i] = sec, 0
		}
		d.count[p][i]++
	}
}

// rate is the completions per second of the narrowest pool k uses.
func (d *drainMeter) rate(k Kind, now time.Time) float64 {
	pools := poolsOf(k)
	p := pools[len(pools)-1]
	sec := now.Unix()
	n := 0
	for i := range drainWindow {
		if sec-d.sec[p][i] < drainWindow {
			n += d.count[p][i]
		}
	}
	return float64(n) / drainWindow
}

// principalHash is a short pseudonym of a principal key for /metrics.
func principalHash(key string) string {
	sum := sha256.Sum256([]byte("principal\x00" + key))
	return hex.EncodeToString(sum[:8])
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
