// Package admission is the process-wide admission controller of mcp-backend.
// It turns overload into a bounded, explicit condition: a fixed number of tool
// operations run at once (with slots reserved for control operations and a
// separate cap on shell commands), a bounded queue waits for capacity, and
// everything beyond fails at once with OVERLOADED.
//
// One Controller must serve every request of a process: a limit is only a
// limit if every path shares it.
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

// Sentinel errors callers branch on to build the tool error.
var (
	ErrQueueFull    = errors.New("admission queue is full")      // OVERLOADED, counted rejected
	ErrQueueTimeout = errors.New("admission queue wait expired") // OVERLOADED, counted timedOut
	ErrCancelled    = errors.New("cancelled while queued")       // CANCELLED, counted cancelled
	// ErrPreempted: a queued non-control operation gave its place to a
	// control operation that found the queue full. It is a queue-full
	// refusal (errors.Is ErrQueueFull: OVERLOADED, counted rejected) and is
	// also counted preempted.
	ErrPreempted = fmt.Errorf("%w: its place went to a control operation", ErrQueueFull)
	// ErrStopped: the controller was stopped (the process is shutting
	// down) before the operation started; counted cancelled.
	ErrStopped = errors.New("admission stopped: shutting down")
)

// Limits are the configured bounds.
type Limits struct {
	MaxActive       int
	ReservedControl int
	MaxShell        int
	MaxQueue        int
	QueueWait       time.Duration
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
	}
	return nil
}

// waiter is one queued operation. granted and the list links are guarded by
// the controller's mutex.
type waiter struct {
	kind       Kind
	ready      chan struct{} // closed when granted or evicted
	granted    bool
	evicted    bool // removed from the queue for a control operation
	stopped    bool // removed from the queue by Stop
	prev, next *waiter
}

// queue is an intrusive FIFO list, so removal of a cancelled waiter is O(1).
type queue struct {
	head, tail *waiter
}

func (q *queue) push(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *queue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// The gauges live in one 64-bit word of 12-bit fields, so one atomic load
// is a consistent view and one compare-and-swap takes or frees a slot.
// Operations that neither see nor create queued waiters never touch the
// mutex; everything that involves the queue runs under it. Because the
// queued counts share the word with the active counts, a release can never
// miss a waiter that queued concurrently: either the release's CAS sees the
// waiter's count and takes the slow path, or the waiter's CAS sees the freed
// slot and starts at once.
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
	state atomic.Uint64 // the packed gauges

	mu       sync.Mutex // guards the queues and every change while queued
	controlQ queue
	normalQ  queue

	peakActive, peakNonControl, peakShell, peakQueued  atomic.Int64
	accepted, completed, rejected, timedOut, cancelled atomic.Int64
	preempted                                          atomic.Int64
	stopped                                            atomic.Bool // set under mu
}

// New returns a controller for lim. It panics on invalid limits: config
// validation runs before it.
func New(lim Limits) *Controller {
	if err := lim.Validate(); err != nil {
		panic(err)
	}
	return &Controller{lim: lim}
}

// Limits returns the configured limits.
func (c *Controller) Limits() Limits { return c.lim }

// Permit is a granted slot. Release it exactly once.
type Permit struct {
	c        *Controller
	kind     Kind
	released atomic.Bool
}

// Kind is the class the permit was granted for.
func (p *Permit) Kind() Kind { return p.kind }

// Release frees the slot and hands it to the next startable waiter. A second
// Release is a bug in the caller and panics rather than corrupting the counts.
func (p *Permit) Release() {
	if !p.released.CompareAndSwap(false, true) {
		panic("admission: permit released twice")
	}
	c := p.c
	c.completed.Add(1)
	for {
		s := c.state.Load()
		if queuedTotal(s) > 0 {
			break
		}
		if c.state.CompareAndSwap(s, s-takeDelta[p.kind]) {
			return
		}
	}
	c.mu.Lock()
	c.state.Add(-takeDelta[p.kind])
	c.dispatch()
	c.mu.Unlock()
}

// canStart reports whether an operation of kind k fits in state s.
func (c *Controller) canStart(s uint64, k Kind) bool {
	if field(s, shTotal) >= c.lim.MaxActive {
		return false
	}
	if k == Control {
		return true
	}
	if field(s, shNonControl) >= c.lim.MaxNonControl() {
		return false
	}
	return k != Shell || field(s, shShell) < c.lim.MaxShell
}

// tryTake occupies a slot of kind k if it fits; with mustBeEmpty it also
// requires an empty queue (the lock-free fast path may not overtake waiters).
func (c *Controller) tryTake(k Kind, mustBeEmpty bool) bool {
	for {
		s := c.state.Load()
		if (mustBeEmpty && queuedTotal(s) > 0) || !c.canStart(s, k) {
			return false
		}
		n := s + takeDelta[k]
		if c.state.CompareAndSwap(s, n) {
			c.notePeaks(n)
			return true
		}
	}
}

func (c *Controller) notePeaks(s uint64) {
	setMax(&c.peakActive, int64(field(s, shTotal)))
	setMax(&c.peakNonControl, int64(field(s, shNonControl)))
	setMax(&c.peakShell, int64(field(s, shShell)))
	setMax(&c.peakQueued, int64(queuedTotal(s)))
}

// dispatch grants queued waiters while capacity allows: control first, FIFO
// within a class, skipping waiters that cannot start yet so a waiting shell
// command never blocks startable work behind it. Caller holds mu.
//
// Invariant after dispatch: no queued waiter could start now. That is what
// lets a new arrival that fits start at once without overtaking anyone.
func (c *Controller) dispatch() {
	for w := c.controlQ.head; w != nil; {
		next := w.next
		if !c.grant(&c.controlQ, w) {
			break // no slot at all is free
		}
		w = next
	}
	for w := c.normalQ.head; w != nil; {
		s := c.state.Load()
		if field(s, shTotal) >= c.lim.MaxActive || field(s, shNonControl) >= c.lim.MaxNonControl() {
			return
		}
		next := w.next
		c.grant(&c.normalQ, w)
		w = next
	}
}

// grant moves w from the queue to a slot if it fits. Caller holds mu.
func (c *Controller) grant(q *queue, w *waiter) bool {
	for {
		s := c.state.Load()
		if !c.canStart(s, w.kind) {
			return false
		}
		n := s - queuedDelta(w.kind) + takeDelta[w.kind]
		if c.state.CompareAndSwap(s, n) {
			c.notePeaks(n)
			break
		}
	}
	q.remove(w)
	w.granted = true
	close(w.ready)
	return true
}

// Acquire waits for a slot of kind k. It returns at once when one is free,
// ErrQueueFull at once when the queue is full, ErrQueueTimeout after the
// queue wait, and ErrCancelled when ctx ends first; those errors never hold
// a slot.
func (c *Controller) Acquire(ctx context.Context, k Kind) (*Permit, error) {
	if ctx.Err() != nil {
		c.cancelled.Add(1)
		return nil, ErrCancelled
	}
	if c.stopped.Load() {
		c.cancelled.Add(1)
		return nil, ErrStopped
	}
	if c.tryTake(k, true) {
		c.accepted.Add(1)
		return &Permit{c: c, kind: k}, nil
	}
	c.mu.Lock()
	if c.stopped.Load() {
		c.mu.Unlock()
		c.cancelled.Add(1)
		return nil, ErrStopped
	}
	var w *waiter
	for w == nil {
		s := c.state.Load()
		if c.canStart(s, k) {
			// Under mu every startable waiter has been granted already,
			// so starting now overtakes no one.
			if c.state.CompareAndSwap(s, s+takeDelta[k]) {
				c.notePeaks(s + takeDelta[k])
				c.mu.Unlock()
				c.accepted.Add(1)
				return &Permit{c: c, kind: k}, nil
			}
			continue
		}
		if queuedTotal(s) >= c.lim.MaxQueue {
			if v := c.normalQ.tail; k == Control && v != nil {
				// Control work is never refused because normal work
				// filled the queue: it takes the place of the youngest
				// queued normal operation, which is refused at once.
				n := s - queuedDelta(v.kind) + queuedDelta(Control)
				if !c.state.CompareAndSwap(s, n) {
					continue
				}
				c.normalQ.remove(v)
				v.evicted = true
				close(v.ready)
				c.rejected.Add(1)
				c.preempted.Add(1)
				w = &waiter{kind: k, ready: make(chan struct{})}
				break
			}
			c.mu.Unlock()
			c.rejected.Add(1)
			return nil, ErrQueueFull
		}
		if n := s + queuedDelta(k); c.state.CompareAndSwap(s, n) {
			c.notePeaks(n)
			w = &waiter{kind: k, ready: make(chan struct{})}
		}
	}
	q := &c.normalQ
	if k == Control {
		q = &c.controlQ
	}
	q.push(w)
	c.mu.Unlock()

	timer := time.NewTimer(c.lim.QueueWait)
	defer timer.Stop()
	var failure error
	select {
	case <-w.ready:
		if w.evicted { // set before ready closed; counted by the evictor
			return nil, ErrPreempted
		}
		if w.stopped { // likewise, counted by Stop
			return nil, ErrStopped
		}
		c.accepted.Add(1)
		return &Permit{c: c, kind: k}, nil
	case <-ctx.Done():
		failure = ErrCancelled
	case <-timer.C:
		failure = ErrQueueTimeout
	}

	c.mu.Lock()
	if w.evicted {
		// The eviction raced the cancellation or timeout: it already left
		// the queue and was counted rejected.
		c.mu.Unlock()
		return nil, ErrPreempted
	}
	if w.stopped {
		c.mu.Unlock()
		return nil, ErrStopped
	}
	if w.granted {
		// The grant raced the cancellation or timeout: hand the slot on
		// instead of stranding it.
		c.state.Add(-takeDelta[k])
		c.dispatch()
	} else {
		q.remove(w)
		c.state.Add(-queuedDelta(k))
	}
	c.mu.Unlock()
	if failure == ErrCancelled {
		c.cancelled.Add(1)
	} else {
		c.timedOut.Add(1)
	}
	return nil, failure
}

// Stop refuses every operation that has not started: queued ones leave at
// once with ErrStopped, later Acquires get it too, and so a slot freed from
// now on is never handed to anyone. Operations already running keep their
// slots until they release them. At shutdown this is what keeps a queued
// call from starting in the slot of a call that the shutdown just ended.
// Stop is idempotent.
func (c *Controller) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped.Store(true)
	for _, q := range []*queue{&c.controlQ, &c.normalQ} {
		for w := q.head; w != nil; {
			next := w.next
			q.remove(w)
			c.state.Add(-queuedDelta(w.kind))
			w.stopped = true
			close(w.ready)
			c.cancelled.Add(1)
			w = next
		}
	}
}

// Shed reports whether an operation of kind k would be refused at once
// because it can neither start nor queue now (control work can queue while
// normal work is queued: it takes its place), and if so counts it as
// rejected. A transport uses it to answer OVERLOADED before spending work on
// a request the controller would refuse anyway: under overload most requests
// are such, and shedding them cheaply keeps latency low for the rest.
func (c *Controller) Shed(k Kind) bool {
	s := c.state.Load()
	if c.canStart(s, k) || queuedTotal(s) < c.lim.MaxQueue || (k == Control && field(s, shQNormal) > 0) {
		return false
	}
	c.rejected.Add(1)
	return true
}

// Full reports whether the queue is full: the /readyz condition. It is one
// atomic load. With maxQueue 0 there is no queue to fill: it is "full" when
// new normal work would be refused, so /readyz is not 503 forever.
func (c *Controller) Full() bool {
	s := c.state.Load()
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
