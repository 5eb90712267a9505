package admission

import (
	"time"

	"golang.org/x/sys/unix"
)

// Who starts first across processes. Each process keeps its own queue; a
// slot freed in one of them would go to that process's own waiters, so a
// process with a long queue (a slot handing off, which still finishes what
// it accepted) would starve the other's waiters (the slot taking over, and
// the cutover's verification calls) for as long as its queue lasts. So,
// while shared, each process publishes in its record the enqueue time of
// its oldest waiter of each kind, and before it starts anything it yields
// to a live peer's waiter that would go first: control before other work
// (control priority holds for the service), otherwise the older one. The
// peer takes the slot at its next look at the ledger (ShareInterval).
//
// A peer that has not looked at the ledger for peerStale (stopped, or
// stuck) is not waited for, and a peer's waiter is yielded to for at most
// claimWait: if the peer has not started it by then (its own fair shares
// hold it back), the slot is used here rather than left idle.

const (
	peerStale = 500 * time.Millisecond
	claimWait = 500 * time.Millisecond
)

// numKinds is the number of admission kinds.
const numKinds = int(Control) + 1

// monoNow is the system's monotonic clock in nanoseconds: the one clock
// every process on the host reads alike, so enqueue times compare across
// processes.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// peerHead is another process's oldest waiter of one kind, as its record
// says.
type peerHead struct {
	rec   int    // the record, which names the process
	pid   uint64 // breaks ties of equal times
	kind  Kind
	since int64 // enqueue time, CLOCK_MONOTONIC ns
}

// precedes reports whether peer head h goes before an operation of kind k
// of this process (pid) that waits since since.
func (h peerHead) precedes(k Kind, since int64, pid uint64) bool {
	switch {
	case h.kind == Control && k != Control:
		return true
	case k == Control && h.kind != Control:
		return false
	case h.since != since:
		return h.since < since
	}
	return h.pid < pid
}

// crossYield decides, with u held in the whole service, whether an
// operation of kind k of this process (pid), waiting since since (now, for
// an arrival), must leave its slot to one of heads: a head that fits now,
// that would no longer fit once this operation started, and that goes
// first. It returns that head's index in heads, or -1: start.
func crossYield(k Kind, since int64, pid uint64, u usage, heads []peerHead, fits func(usage, Kind) bool) int {
	after := usage(addUsage(uint64(u), takeDelta[k]))
	for i, h := range heads {
		if fits(u, h.kind) && !fits(after, h.kind) && h.precedes(k, since, pid) {
			return i
		}
	}
	return -1
}

// yieldState is what the controller remembers of its yields: for each
// record and kind, the head it last yielded to and since when.
type yieldState [ledgerRecords][numKinds]struct{ since, first int64 }

// yields reports whether an operation of kind k waiting since since (0:
// arriving now) must let a peer's waiter start first. Alone, or with no
// peer waiting, it costs a branch: no clock read. Caller holds mu.
func (c *Controller) yields(k Kind, since int64) bool {
	heads := c.sh.heads
	if !c.sh.together || len(heads) == 0 {
		return false
	}
	if since == 0 {
		since = monoNow()
	}
	for {
		i := crossYield(k, since, c.sh.ledger.pid, c.usage(), heads, c.flows.fits)
		if i < 0 {
			return false
		}
		h := heads[i]
		y := &c.sh.yielded[h.rec][h.kind]
		now := monoNow()
		if y.since != h.since {
			y.since, y.first = h.since, now
			c.sh.yields.Add(1)
		}
		if now-y.first < int64(claimWait) {
			return true
		}
		// Left for claimWait and not taken: the peer will not start it
		// now. Judge by the other heads.
		heads = append(heads[:i:i], heads[i+1:]...)
	}
}

// ownHeads is the enqueue time of this process's oldest waiter of each
// kind (0: none). Caller holds mu.
func (c *Controller) ownHeads() (heads [numKinds]int64) {
	for p := c.flows.waiting.head; p != nil; p = p.waitL.next {
		for conv := p.waitConvs.head; conv != nil; conv = conv.waitL.next {
			for w := conv.head; w != nil; w = w.next {
				if h := &heads[w.kind]; *h == 0 || w.since < *h {
					*h = w.since
				}
			}
		}
	}
	return heads
}
