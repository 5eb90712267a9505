// Package admission is the process-wide admission controller of mcp-backend.
// It turns overload into a bounded, explicit condition: a fixed number of tool
// operations run at once (with slots reserved for control operations and a
// separate cap on shell commands), a bounded queue waits for capacity, and
// everything beyond fails at once with OVERLOADED.
//
// Inside those bounds it shares capacity fairly among flows (a principal,
// then a conversation within it): a freed slot goes to the flow that has had
// the least service, no flow holds more than its max-min fair share of a
// class while others want it, a small reserve of each class stays for a
// flow that holds nothing, and a full queue gives a place held by the flow
// with the most places to an arrival from a flow with fewer. The decisions
// are made by a pure dispatcher (fair.go) under the controller's lock.
//
// One Controller must serve every request of a process: a limit is only a
// limit if every path shares it. Where several processes serve one socket
// (the production slots during a cutover), their controllers hold one set
// of limits through a Ledger (ledger.go, service.go).
package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Kind is the admission class of an operation.
type Kind uint8

const (
	// Normal operations use the non-control share of the slots.
	Normal Kind = iota
	// Shell operations are normal and also take a shell slot.
	Shell
	// Control operations may also use the reserved slots.
	Control
)

func (k Kind) String() string {
	switch k {
	case Control:
		return "control"
	case Shell:
		return "shell"
	default:
		return "normal"
	}
}

// KindOf classifies a tool by name; unknown tools are normal.
func KindOf(tool string) Kind {
	switch mcpwire.ClassOf(tool) {
	case mcpwire.ClassControl:
		return Control
	case mcpwire.ClassShell:
		return Shell
	}
	return Normal
}

// Sentinel errors callers branch on to build the tool error. Refusals that
// are OVERLOADED come wrapped in a *Refusal that says whose limit it was.
var (
	ErrQueueFull    = errors.New("admission queue is full")      // OVERLOADED, counted rejected
	ErrQueueTimeout = errors.New("admission queue wait expired") // OVERLOADED, counted timedOut
	ErrCancelled    = errors.New("cancelled while queued")       // CANCELLED, counted cancelled
	// ErrPreempted: a queued non-control operation gave its place to a
	// control operation that found the queue full. It is a queue-full
	// refusal (errors.Is ErrQueueFull: OVERLOADED, counted rejected) and is
	// also counted preempted.
	ErrPreempted = fmt.Errorf("%w: its place went to a control operation", ErrQueueFull)
	// ErrDisplaced: a queued operation of the flow holding the most queue
	// places gave its place to an arrival from a flow holding fewer. A
	// queue-full refusal, also counted displaced.
	ErrDisplaced = fmt.Errorf("%w: its place went to a caller holding fewer places", ErrQueueFull)
	// ErrStopped: the controller was stopped (the process is shutting
	// down) before the operation started; counted cancelled.
	ErrStopped = errors.New("admission stopped: shutting down")
)

// Scope says whose limit an OVERLOADED refusal hit.
type Scope string

const (
	// ScopeServer: the server is full of other callers' fair shares.
	ScopeServer Scope = "server"
	// ScopePrincipal: the caller's principal holds the most.
	ScopePrincipal Scope = "principal"
	// ScopeConversation: the caller's own conversation holds the most.
	ScopeConversation Scope = "conversation"
)

// Refusal is an OVERLOADED decision: why (ErrQueueFull, ErrPreempted,
// ErrDisplaced, ErrQueueTimeout; errors.Is works through it), whose limit,
// and when a retry may be worth it, from what the controller observes.
type Refusal struct {
	Err        error
	Scope      Scope
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Err.Error() + " (" + string(r.Scope) + ")" }
func (r *Refusal) Unwrap() error { return r.Err }

// Flow names who an operation is for: a principal and a conversation
// within it. Principal is "KIND:NAME" with NAME the caller's pseudonym
// (caller.Caller's PrincipalHash), which /metrics shows as it is: the
// controller never sees a raw id. The zero Flow is one anonymous flow.
type Flow struct {
	Principal, Conversation string
}

// Limits are the configured bounds.
type Limits struct {
	MaxActive       int
	ReservedControl int
	MaxShell        int
	MaxQueue        int
	QueueWait       time.Duration
	// FlowReserve slots of each class (shell, non-control, all) that no
	// flow may fill alone: they stay for a flow holding nothing in the
	// class. Applied only to classes of at least two slots; 0 turns the
	// reserve off.
	FlowReserve int
	// MaxFlows bounds the conversations tracked (and, separately, the
	// principals); beyond it new ones share hash buckets. 0 means 1024.
	MaxFlows int
	// FlowIdle is how long a flow with nothing active or queued is kept
	// (with its service history) before it is forgotten. 0 means 5 minutes.
	FlowIdle time.Duration
}

// MaxNonControl is the share of slots normal work may use.
func (l Limits) MaxNonControl() int { return l.MaxActive - l.ReservedControl }

// Validate checks the limits the way config validation does.
func (l Limits) Validate() error {
	switch {
	case l.MaxActive <= 0, l.ReservedControl <= 0, l.MaxShell <= 0, l.QueueWait <= 0:
		return errors.New("admission: maxActive, reservedControl, maxShell and queueWait must be > 0")
	case l.ReservedControl >= l.MaxActive:
		return errors.New("admission: reservedControl must be < maxActive")
	case l.MaxShell > l.MaxNonControl():
		return errors.New("admission: maxShell must be <= maxActive - reservedControl")
	case l.MaxQueue < 0:
		return errors.New("admission: maxQueue must be >= 0")
	case l.MaxActive > MaxLimit, l.MaxQueue > MaxLimit:
		return errors.New("admission: maxActive and maxQueue must be <= 4095")
	case l.FlowReserve < 0, l.MaxFlows < 0, l.FlowIdle < 0:
		return errors.New("admission: flowReserve, maxFlows and flowIdle must be >= 0")
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if l.MaxFlows == 0 {
		l.MaxFlows = 1024
	}
	if l.FlowIdle == 0 {
		l.FlowIdle = 5 * time.Minute
	}
	return l
}

// The gauges live in one 64-bit word of 12-bit fields, so one atomic load
// is a consistent view for Full, Occupancy and /readyz without the lock.
// Every change is made under the controller's mutex.
const (
	fieldBits = 12
	fieldMask = 1<<fieldBits - 1
	// MaxLimit is the largest value maxActive and maxQueue may take.
	MaxLimit = fieldMask

	shTotal      = 0 * fieldBits
	shNonControl = 1 * fieldBits
	shShell      = 2 * fieldBits
	shQControl   = 3 * fieldBits
	shQNormal    = 4 * fieldBits
)

func field(s uint64, shift uint) int { return int(s >> shift & fieldMask) }

// takeDelta is what occupying one slot of a kind adds to the word.
var takeDelta = [...]uint64{
	Normal:  1<<shTotal | 1<<shNonControl,
	Shell:   1<<shTotal | 1<<shNonControl | 1<<shShell,
	Control: 1 << shTotal,
}

func queuedDelta(k Kind) uint64 {
	if k == Control {
		return 1 << shQControl
	}
	return 1 << shQNormal
}

func queuedTotal(s uint64) int { return field(s, shQControl) + field(s, shQNormal) }

// Controller admits operations within the limits. Create it with New and
// share it.
type Controller struct {
	lim   Limits
	clock Clock
	start time.Time     // the clock's time at New
	state atomic.Uint64 // the packed gauges; written under mu

	mu     sync.Mutex // guards everything below and every change of state
	flows  flowTable
	spare  []*Permit // released permits, handed out again
	last   instant   // the latest time a decision was made at
	drain  drainMeter
	redo   Timer   // re-dispatch when a flow's remembered demand lapses
	redoAt instant // when redo fires, if redoOn
	redoOn bool
	// On the real clock, last serves as now for a tick after it was read
	// (coarse): see lock.
	coarse bool
	fresh  bool  // last was read less than a tick ago
	stale  Timer // clears fresh

	// Counted under mu, where the hot path is anyway: an atomic each
	// would cost a call more than the rest of the bookkeeping. Metrics
	// read them under mu.
	peakActive, peakNonControl, peakShell, peakQueued int64
	accepted, completed                               int64

	// Counted where mu is not held. acceptedQueued: a granted waiter
	// counts itself as it wakes (a grant that races a cancellation is
	// handed back, never accepted).
	acceptedQueued, rejected, timedOut, cancelled atomic.Int64
	preempted, displaced                          atomic.Int64
	stopped                                       atomic.Bool // set under mu

	sh sharedState // the limits held with other processes (service.go)
}

// Option adjusts a Controller at construction.
type Option func(*Controller)

// WithEventClock sets the clock the controller reads and sets its timers
// on: a test clock makes the dispatcher deterministic.
func WithEventClock(clk Clock) Option { return func(c *Controller) { c.clock = clk } }

// now is the clock's time, read as the time since the controller's start.
func (c *Controller) now() instant { return c.clock.Since(c.start) }

// tick is how long a reading of the real clock serves as the time of the
// decisions after it. A reading costs about as much as the rest of an
// acquire and release together; so under load the clock is read once a
// tick, not twice a call. Service is then measured in steps of about a
// tick (a hold is charged the steps it spans, so a hold shorter than a
// tick may be charged nothing, and a timer firing late makes a step
// longer), which evens out over a busy flow's holds; lapses of remembered
// demand and the refusal and drain windows, all in seconds, move by as
// much. A clock given with WithClock or WithEventClock is read at every
// decision, so the dispatcher's shares stay exact in tests.
const tick = time.Millisecond

// lock takes mu and returns the time the decisions under it are made at,
// never before a time already used. Remembered demand that has lapsed by
// then lapses.
func (c *Controller) lock() instant {
	if c.coarse {
		c.mu.Lock()
		if c.sh.together {
			c.enterShared()
		}
		if !c.fresh {
			c.freshen()
		}
		c.flows.expire(c.last)
		return c.last
	}
	return c.lockExact()
}

// lockExact is lock with the clock read now: where a decision waits on
// the time itself (a lapse of remembered demand). The clock is read before
// the lock, so the lock is not held over it; a caller that read it first
// may get the lock second, hence the max.
func (c *Controller) lockExact() instant {
	now := c.now()
	c.mu.Lock()
	if c.sh.together {
		c.enterShared()
	}
	c.last = max(c.last, now)
	c.flows.expire(c.last)
	return c.last
}

// freshen reads the real clock into last, good for a tick. Caller holds
// mu.
func (c *Controller) freshen() {
	c.last = max(c.last, c.now())
	c.fresh = true
	if c.stale == nil {
		c.stale = c.clock.AfterFunc(tick, func() {
			c.mu.Lock()
			c.fresh = false
			c.mu.Unlock()
		})
		return
	}
	c.stale.Reset(tick)
}

// New returns a controller for lim. It panics on invalid limits: config
// validation runs before it.
func New(lim Limits, opts ...Option) *Controller {
	if err := lim.Validate(); err != nil {
		panic(err)
	}
	c := &Controller{lim: lim.withDefaults(), clock: systemClock{}}
	for _, o := range opts {
		o(c)
	}
	sc, ok := c.clock.(systemClock)
	c.coarse = ok && sc.now == nil
	c.start = c.clock.Now()
	c.flows.init(c.lim)
	return c
}

// Limits returns the configured limits.
func (c *Controller) Limits() Limits { return c.lim }

// Permit is a granted slot. Release it exactly once, and do not use it
// after: the controller hands it out again (so the hot path allocates
// nothing), and a Release of a permit handed out again would free its new
// holder's slot. A second Release before that panics.
type Permit struct {
	c        *Controller
	kind     Kind
	conv     *flowState
	released bool // guarded by the controller's mutex
}

// Kind is the class the permit was granted for.
func (p *Permit) Kind() Kind { return p.kind }

// Release frees the slot and hands it to the next startable waiter. A second
// Release is a bug in the caller and panics rather than corrupting the counts.
func (p *Permit) Release() {
	c := p.c
	now := c.lock()
	// Checked under mu, where the permit is handed out again: no atomic.
	if p.released {
		c.unlock()
		panic("admission: permit released twice")
	}
	p.released = true
	c.completed++
	c.state.Add(-takeDelta[p.kind])
	c.flows.finish(p.conv, p.kind, now)
	c.drain.note(p.kind, now)
	c.dispatch(now)
	c.recycle(p)
	c.unlock()
}

// canStart reports whether an operation of kind k fits in state s.
func (c *Controller) canStart(s uint64, k Kind) bool { return c.flows.fits(usageOf(s), k) }

// noteActivePeaks raises the peaks of slots held to state s, after a
// start (which queues nothing, so the queue's peak stays). Caller holds
// mu.
func (c *Controller) noteActivePeaks(s uint64) {
	c.peakActive = max(c.peakActive, int64(field(s, shTotal)))
	c.peakNonControl = max(c.peakNonControl, int64(field(s, shNonControl)))
	c.peakShell = max(c.peakShell, int64(field(s, shShell)))
}

// dispatch grants queued waiters while capacity and fair shares allow:
// control first; among the flows with a waiter that may start, the
// principal and then the conversation with the least service; within a
// flow its oldest startable waiter, so a waiting shell command never blocks
// startable work behind it. Caller holds mu.
//
// Invariant after dispatch: no queued waiter could start now. That is what
// lets a new arrival that may start do so at once without overtaking anyone.
func (c *Controller) dispatch(now instant) {
	if queuedTotal(c.state.Load()) == 0 {
		return // nothing to grant, nor a redo to arm (armRedo wants waiters)
	}
	for queuedTotal(c.state.Load()) > 0 {
		w := c.flows.pick(c.usage(), now)
		if w == nil || c.yields(w.kind, w.since) {
			// A yield stops the round: the peer takes the slot at its
			// next look, and ours are dispatched again at our next.
			break
		}
		c.grant(w, now)
	}
	c.armRedo(now)
}

// grant moves w from the queue to a slot. Caller holds mu and has checked
// that it may start.
func (c *Controller) grant(w *waiter, now instant) {
	n := c.state.Load() - queuedDelta(w.kind) + takeDelta[w.kind]
	c.state.Store(n)
	c.noteActivePeaks(n)
	c.flows.unlink(w)
	c.flows.start(w.conv, w.kind, now)
	// The permit goes with the grant: the waiter wakes up holding it,
	// with no second turn at the lock.
	w.permit = c.permit(w.kind, w.conv)
	close(w.ready)
}

// armRedo schedules a dispatch for when a flow's remembered demand lapses
// while waiters are held back by it; nothing else would wake them if no
// call ends meanwhile. Caller holds mu.
func (c *Controller) armRedo(now instant) {
	at, ok := c.flows.lapse()
	if !ok || queuedTotal(c.state.Load()) == 0 || (c.redoOn && at >= c.redoAt) {
		return
	}
	c.redoAt, c.redoOn = at, true
	d := at - now + time.Millisecond
	if c.redo == nil {
		c.redo = c.clock.AfterFunc(d, c.redispatch)
		return
	}
	c.redo.Reset(d)
}

func (c *Controller) redispatch() {
	now := c.lockExact() // the lapse it was set for has come
	defer c.unlock()
	c.redoOn = false
	c.dispatch(now)
}

// mayStartNow reports whether an operation of kind k of conv, its demand
// counted, fits the caps and its flow's shares as things stand. Caller
// holds mu.
func (c *Controller) mayStartNow(conv *flowState, k Kind) bool {
	u := c.usage()
	return c.flows.fits(u, k) && c.flows.mayStart(u, conv, k) && !c.yields(k, 0)
}

// permit hands out a permit for a slot of kind k of conv. Caller holds mu.
func (c *Controller) permit(k Kind, conv *flowState) *Permit {
	var p *Permit
	if n := len(c.spare); n > 0 {
		p, c.spare = c.spare[n-1], c.spare[:n-1]
		p.released = false
	} else {
		p = &Permit{c: c}
	}
	p.kind, p.conv = k, conv
	return p
}

// recycle keeps a released permit to hand out again. Caller holds mu.
func (c *Controller) recycle(p *Permit) {
	p.conv = nil
	if len(c.spare) < c.lim.MaxActive {
		c.spare = append(c.spare, p)
	}
}

// Acquire waits for a slot of kind k for the anonymous flow.
func (c *Controller) Acquire(ctx context.Context, k Kind) (*Permit, error) {
	return c.AcquireFlow(ctx, k, Flow{})
}

// AcquireFlow waits for a slot of kind k for flow f. It returns at once when
// one is free for f, a *Refusal (ErrQueueFull) at once when the queue is
// full and f holds no fewer places than anyone, a *Refusal (ErrQueueTimeout)
// after the queue wait, and ErrCancelled when ctx ends first; those errors
// never hold a slot.
func (c *Controller) AcquireFlow(ctx context.Context, k Kind, f Flow) (*Permit, error) {
	if ctx.Err() != nil {
		c.cancelled.Add(1)
		return nil, ErrCancelled
	}
	if c.stopped.Load() {
		c.cancelled.Add(1)
		return nil, ErrStopped
	}
	now := c.lock()
	if c.stopped.Load() {
		c.unlock()
		c.cancelled.Add(1)
		return nil, ErrStopped
	}
	conv := c.flows.get(f, now)
	// The arrival's demand counts in the shares it is judged by.
	c.flows.arrive(conv, k, now)
	if c.mayStartNow(conv, k) {
		// After dispatch no queued waiter may start, so starting now
		// overtakes no one.
		n := c.state.Load() + takeDelta[k]
		c.state.Store(n)
		c.noteActivePeaks(n)
		c.flows.start(conv, k, now)
		p := c.permit(k, conv)
		c.accepted++
		c.unlock()
		return p, nil
	}
	return c.wait(ctx, k, conv, now)
}

// wait queues an operation of kind k of conv that may not start now, or
// refuses it, and waits for its grant. Caller holds mu, which wait
// releases. Apart from AcquireFlow so that the start at once carries
// neither its frame nor its defer.
func (c *Controller) wait(ctx context.Context, k Kind, conv *flowState, now instant) (*Permit, error) {
	w := &waiter{kind: k, conv: conv, ready: make(chan struct{})}
	s := c.state.Load()
	if queuedTotal(uint64(c.usage())) >= c.lim.MaxQueue {
		victim, scope := c.flows.victim(conv, k)
		if victim == nil && k == Control {
			// Control work is never refused because normal work filled
			// the queue: it takes the place of the youngest normal
			// operation of the flow holding the most normal places.
			victim = c.flows.normalVictim()
			if victim != nil {
				victim.evicted = ErrPreempted
				c.preempted.Add(1)
			}
		} else if victim != nil {
			victim.evicted = ErrDisplaced
			c.displaced.Add(1)
		}
		if victim == nil {
			c.flows.dequeue(w, now)
			r := c.refusal(ErrQueueFull, scope, conv, k, now)
			c.dispatch(now) // the arrival's demand is gone again
			c.unlock()
			c.rejected.Add(1)
			return nil, r
		}
		c.state.Store(s - queuedDelta(victim.kind))
		c.flows.dequeue(victim, now)
		vscope := ScopeConversation
		if victim.conv.principal != conv.principal {
			vscope = ScopePrincipal
		}
		victim.refusal = c.refusal(ErrQueueFull, vscope, victim.conv, victim.kind, now)
		close(victim.ready)
		c.rejected.Add(1)
	}
	n := c.state.Load() + queuedDelta(k)
	c.state.Store(n)
	c.peakQueued = max(c.peakQueued, int64(queuedTotal(n)))
	c.flows.queue(w)
	c.dispatch(now) // a place given up may have raised another flow's share
	c.unlock()

	timer, expired := c.clock.NewTimer(c.lim.QueueWait)
	defer timer.Stop()
	var failure error
	select {
	case <-w.ready:
		if w.evicted != nil { // set before ready closed; counted by the evictor
			return nil, c.evictedError(w)
		}
		if w.stopped { // likewise, counted by Stop
			return nil, ErrStopped
		}
		c.acceptedQueued.Add(1)
		return w.permit, nil // set before ready closed
	case <-ctx.Done():
		failure = ErrCancelled
	case <-expired:
		failure = ErrQueueTimeout
	}

	now = c.lock()
	switch {
	case w.evicted != nil:
		// The eviction raced the cancellation or timeout: it already left
		// the queue and was counted rejected.
		c.unlock()
		return nil, c.evictedError(w)
	case w.stopped:
		c.unlock()
		return nil, ErrStopped
	case w.permit != nil:
		// The grant raced the cancellation or timeout: hand the slot on
		// instead of stranding it.
		c.state.Add(-takeDelta[k])
		c.flows.finish(conv, k, now)
		c.recycle(w.permit)
	default:
		c.state.Add(-queuedDelta(k))
		c.flows.dequeue(w, now)
	}
	var r *Refusal
	if failure == ErrQueueTimeout {
		r = c.refusal(ErrQueueTimeout, ScopeServer, conv, k, now)
	}
	c.dispatch(now)
	c.unlock()
	if failure == ErrCancelled {
		c.cancelled.Add(1)
		return nil, ErrCancelled
	}
	c.timedOut.Add(1)
	return nil, r
}

func (c *Controller) evictedError(w *waiter) error {
	if w.refusal != nil {
		w.refusal.Err = w.evicted
		return w.refusal
	}
	return w.evicted
}

// refusal builds an OVERLOADED decision for flow conv and counts it against
// the flow. Caller holds mu.
func (c *Controller) refusal(err error, scope Scope, conv *flowState, k Kind, now instant) *Refusal {
	recent := c.flows.refused(conv, now)
	return &Refusal{Err: err, Scope: scope, RetryAfter: c.retryAfter(k, recent, now)}
}

// retryAfter estimates when a retry could find a place: the time the class
// takes to drain what is queued ahead, from its completions over the last
// seconds, doubled for each doubling of the flow's own recent refusals (a
// caller that retries at once is told to wait longer), within [50ms, 32s].
func (c *Controller) retryAfter(k Kind, recentRefusals int, now instant) time.Duration {
	const lo, hi = 50 * time.Millisecond, 32 * time.Second
	rate := c.drain.rate(k, now) // completions per second
	ahead := float64(queuedTotal(uint64(c.usage())) + 1)
	est := hi
	if rate > 0 {
		est = time.Duration(ahead / rate * float64(time.Second))
	}
	for n := recentRefusals; n > 1 && est < hi; n >>= 1 {
		est *= 2
	}
	return min(max(est, lo), hi)
}

// Stop refuses every operation that has not started: queued ones leave at
// once with ErrStopped, later Acquires get it too, and so a slot freed from
// now on is never handed to anyone. Operations already running keep their
// slots until they release them. At shutdown this is what keeps a queued
// call from starting in the slot of a call that the shutdown just ended.
// Stop is idempotent.
func (c *Controller) Stop() {
	now := c.lockExact()
	defer c.unlock()
	c.stopped.Store(true)
	for _, w := range c.flows.allWaiters() {
		c.state.Add(-queuedDelta(w.kind))
		c.flows.dequeue(w, now)
		w.stopped = true
		close(w.ready)
		c.cancelled.Add(1)
	}
}

// ShedFlow returns the refusal an operation of kind k for flow f would get
// at once, because it can neither start nor queue now (nor take a place held
// by a flow with more), and counts it as rejected; nil when it would start
// or queue. A transport uses it to answer OVERLOADED before spending work on
// a request the controller would refuse anyway: under overload most
// requests are such, and shedding them cheaply keeps latency low for the
// rest. It decides with the caller's flow, so a polite caller is not shed
// for a greedy one's queue.
func (c *Controller) ShedFlow(k Kind, f Flow) *Refusal {
	s := addUsage(c.state.Load(), c.sh.outside.Load())
	if queuedTotal(s) < c.lim.MaxQueue || c.stopped.Load() {
		return nil // Acquire decides (and answers a stop itself)
	}
	now := c.lock()
	defer c.unlock()
	conv := c.flows.get(f, now)
	c.flows.arrive(conv, k, now)
	defer c.flows.leave(conv, k, now)
	if c.mayStartNow(conv, k) {
		return nil
	}
	victim, scope := c.flows.victim(conv, k)
	if victim != nil || (k == Control && c.flows.normalVictim() != nil) {
		return nil
	}
	c.rejected.Add(1)
	return c.refusal(ErrQueueFull, scope, conv, k, now)
}

// Occupancy is the slots held and the places queued: one atomic load,
// without the lock, so /readyz answers at once however busy the
// dispatcher is.
func (c *Controller) Occupancy() (active, queued int) {
	s := c.state.Load()
	return field(s, shTotal), queuedTotal(s)
}

// Full reports whether the queue is full: the /readyz condition. It is one
// atomic load. With maxQueue 0 there is no queue to fill: it is "full" when
// new normal work would be refused, so /readyz is not 503 forever.
func (c *Controller) Full() bool {
	s := c.state.Load()
	if o := c.sh.outside.Load(); o != 0 {
		s = addUsage(s, o)
	}
	if c.lim.MaxQueue == 0 {
		return !c.canStart(s, Normal)
	}
	return queuedTotal(s) >= c.lim.MaxQueue
}

func setMax(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// RetryAfter is the retry hint for a refusal that is no flow's doing (the
// memory guard, the body budget): how long the class takes to drain what
// is queued, from its recent completions.
func (c *Controller) RetryAfter(k Kind) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retryAfter(k, 0, c.now())
}
