package admission

import (
	"testing"
	"time"
)

func TestCrossYield(t *testing.T) {
	lim := defaults()
	c := New(lim)
	// u builds a usage of total, non-control and shell slots held.
	u := func(total, nonControl, shell int) usage {
		return usage(uint64(total)<<shTotal | uint64(nonControl)<<shNonControl | uint64(shell)<<shShell)
	}
	const me = 20
	tests := []struct {
		name  string
		k     Kind
		since int64
		u     usage
		heads []peerHead
		want  int
	}{
		{"no peer waits", Shell, 100, u(0, 0, 0), nil, -1},
		{"an older shell of the peer takes the last shell", Shell, 100, u(7, 7, 7), []peerHead{{kind: Shell, since: 50}}, 0},
		{"a younger shell of the peer waits its turn", Shell, 100, u(7, 7, 7), []peerHead{{kind: Shell, since: 150}}, -1},
		{"room for both: nobody yields", Shell, 100, u(6, 6, 6), []peerHead{{kind: Shell, since: 50}}, -1},
		{"the peer's shell cannot start anyway", Normal, 100, u(8, 8, 8), []peerHead{{kind: Shell, since: 50}}, -1},
		{"a normal start would take the peer's shell's last non-control slot", Normal, 100, u(39, 39, 3), []peerHead{{kind: Shell, since: 50}}, 0},
		{"control goes before older normal work", Control, 100, u(47, 40, 8), []peerHead{{kind: Normal, since: 10}}, -1},
		{"normal work leaves the peer's younger control its slot", Normal, 10, u(47, 39, 0), []peerHead{{kind: Control, since: 100}}, 0},
		{"equal times: the lower pid", Shell, 100, u(7, 7, 7), []peerHead{{pid: me - 1, kind: Shell, since: 100}}, 0},
		{"equal times: the higher pid waits", Shell, 100, u(7, 7, 7), []peerHead{{pid: me + 1, kind: Shell, since: 100}}, -1},
		{"the first head that must go first", Shell, 100, u(7, 7, 7), []peerHead{{kind: Shell, since: 150}, {kind: Control, since: 200}, {kind: Shell, since: 60}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := crossYield(tt.k, tt.since, me, tt.u, tt.heads, c.flows.fits); got != tt.want {
				t.Fatalf("crossYield = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestTheOlderWaiterAcrossProcessesStartsFirst: a slot freed in one process
// goes to the other's waiter when that one is older, for its queued
// waiters and for a new arrival alike (before, a process handed its own
// frees to its own queue, so a process with a long queue starved the
// other's).
func TestTheOlderWaiterAcrossProcessesStartsFirst(t *testing.T) {
	tests := []struct {
		name    string
		arrival bool // the releasing process's own is an arrival, not a waiter
	}{
		{"over a waiter of the releasing process", false},
		{"over an arrival at the releasing process", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b, _, _, _ := sharedPair(t, defaults())
			pa := hold(t, a, Shell, 8)
			older := acquireAsync(b, Shell)
			until(t, "b's shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
			var mine <-chan acquired
			if !tt.arrival {
				time.Sleep(2 * time.Millisecond) // a later enqueue time
				mine = acquireAsync(a, Shell)
				until(t, "a's shell queued", func() bool { _, q := a.Occupancy(); return q == 1 })
			}
			until(t, "a sees b's waiter", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.sh.heads) > 0
			})
			pa[0].Release()
			if tt.arrival {
				mine = acquireAsync(a, Shell)
			}
			r := <-older
			if r.err != nil {
				t.Fatal(r.err)
			}
			select {
			case m := <-mine:
				t.Fatalf("a's own (newer) shell started too: %+v; the shells in all: a %d, b 1", m, 7)
			case <-time.After(50 * time.Millisecond):
			}
			r.p.Release()
			if m := <-mine; m.err != nil {
				t.Fatal(m.err)
			} else {
				m.p.Release()
			}
			releaseAll(pa[1:])
		})
	}
}

// TestAStalledPeersWaiterIsNotWaitedFor: a peer that stops looking at the
// ledger (stopped, stuck) does not hold the slots it would get: after
// peerStale the other process starts its own.
func TestAStalledPeersWaiterIsNotWaitedFor(t *testing.T) {
	a, b, _, _, stopA := sharedPair(t, defaults())
	pb := hold(t, b, Shell, 8)
	stalled := acquireAsync(a, Shell)
	until(t, "a's shell queued", func() bool { _, q := a.Occupancy(); return q == 1 })
	until(t, "b sees a's waiter", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.sh.heads) > 0
	})
	stopA() // a makes no decision from now on: its record goes stale
	mine := acquireAsync(b, Shell)
	until(t, "b's shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
	start := time.Now()
	pb[0].Release()
	m := <-mine
	if m.err != nil {
		t.Fatal(m.err)
	}
	t.Logf("figures: b started its own shell %v after the release", time.Since(start).Round(time.Millisecond))
	select {
	case r := <-stalled:
		t.Fatalf("the stalled process's waiter started: %+v", r)
	default:
	}
	m.p.Release()
	releaseAll(pb[1:])
}

// TestAYieldLastsClaimWait: a peer's waiter left unstarted (its own shares
// hold it back) is yielded to for claimWait, not for ever.
func TestAYieldLastsClaimWait(t *testing.T) {
	a, _, la, _, _ := sharedPair(t, defaults())
	pa := hold(t, a, Shell, 7) // the peer's shell would take the last
	defer releaseAll(pa)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sh.heads = []peerHead{{rec: (la.rec + 1) % ledgerRecords, kind: Shell, since: 1}}
	if !a.yields(Shell, monoNow()) {
		t.Fatal("no yield to an older peer waiter")
	}
	time.Sleep(claimWait)
	if a.yields(Shell, monoNow()) {
		t.Fatal("still yielding after claimWait")
	}
	a.sh.heads[0].since = 2 // the peer's next waiter
	if !a.yields(Shell, monoNow()) {
		t.Fatal("no yield to the peer's next waiter")
	}
}
