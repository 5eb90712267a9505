package admission

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sharedPair is two controllers holding one set of limits through a ledger
// in a fresh directory, as two processes do (each opens the file itself,
// so each has its own open file description and its own locks), and
// waits until each counts the other.
func sharedPair(t testing.TB, lim Limits) (a, b *Controller, la, lb *Ledger, stopA func()) {
	t.Helper()
	return sharedPairOf(t, lim, func(t testing.TB, dir string) (*Ledger, *Ledger) {
		return mustOpen(t, dir, "/sys/fs/cgroup", "/proc/self/cgroup"), mustOpen(t, dir, "/sys/fs/cgroup", "/proc/self/cgroup")
	})
}

func mustOpen(t testing.TB, dir, root, procCgroup string) *Ledger {
	t.Helper()
	l, err := openLedger(dir, root, procCgroup)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sharedPairOf(t testing.TB, lim Limits, openPair func(testing.TB, string) (*Ledger, *Ledger)) (a, b *Controller, la, lb *Ledger, stopA func()) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	actx, acancel := context.WithCancel(ctx)
	a, b = New(lim), New(lim)
	la, lb = openPair(t, dir)
	aDone := a.Share(actx, la, time.Millisecond, nil)
	b.Share(ctx, lb, time.Millisecond, nil)
	until(t, "both shared", func() bool { return a.Shared() && b.Shared() })
	return a, b, la, lb, func() { acancel(); <-aDone }
}

// waitFor polls cond; the bound only keeps a broken build from hanging.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("never: %s", what)
		}
	}
}

type acquired struct {
	p   *Permit
	err error
}

func acquireAsync(c *Controller, k Kind) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		p, err := c.Acquire(context.Background(), k)
		ch <- acquired{p, err}
	}()
	return ch
}

func TestTwoProcessesHoldOneSetOfLimits(t *testing.T) {
	lim := defaults()
	tests := []struct {
		name string
		run  func(t *testing.T, a, b *Controller, la, lb *Ledger, stopA func())
	}{
		{"shells: the second process queues what the first holds", func(t *testing.T, a, b *Controller, _, _ *Ledger, _ func()) {
			pa := hold(t, a, Shell, 5)
			pb := hold(t, b, Shell, 3)
			got := acquireAsync(b, Shell)
			until(t, "the ninth shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
			select {
			case r := <-got:
				t.Fatalf("a ninth shell started across the two: %+v", r)
			default:
			}
			pa[0].Release() // the other process's release frees it
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			if m := b.Snapshot(); m.Service == nil || m.Service.Active.Shell != 8 || m.Service.Processes != 2 || !m.Service.Shared || m.Active.Shell != 4 {
				t.Fatalf("metrics: %+v service %+v", m.Active, m.Service)
			}
			releaseAll(append(append(pa[1:], pb...), r.p))
		}},
		{"operations: 48 for both, control keeps its reserve", func(t *testing.T, a, b *Controller, _, _ *Ledger, _ func()) {
			pa := hold(t, a, Normal, 30)
			pb := hold(t, b, Normal, 10) // 40 non-control together
			got := acquireAsync(a, Normal)
			until(t, "the 41st normal queued", func() bool { _, q := a.Occupancy(); return q == 1 })
			pc := hold(t, b, Control, 8) // the reserve is there for control
			control := acquireAsync(a, Control)
			until(t, "the 49th operation queued", func() bool { _, q := a.Occupancy(); return q == 2 })
			pc[0].Release()
			if r := <-control; r.err != nil {
				t.Fatal(r.err)
			} else {
				r.p.Release()
			}
			pb[0].Release()
			if r := <-got; r.err != nil {
				t.Fatal(r.err)
			} else {
				r.p.Release()
			}
			releaseAll(append(append(pa, pb[1:]...), pc[1:]...))
		}},
		{"the queue: 64 places for both", func(t *testing.T, a, b *Controller, _, _ *Ledger, _ func()) {
			pa := hold(t, a, Shell, 8)
			var qa, qb []<-chan acquired
			for range 60 {
				qa = append(qa, acquireAsync(a, Shell))
			}
			until(t, "60 queued in a", func() bool { _, q := a.Occupancy(); return q == 60 })
			for range 4 {
				qb = append(qb, acquireAsync(b, Shell))
			}
			until(t, "4 queued in b", func() bool { _, q := b.Occupancy(); return q == 4 })
			// /readyz: each sees the other's places at its next look.
			until(t, "both full", func() bool { return a.Full() && b.Full() })
			_, err := b.Acquire(context.Background(), Shell)
			var r *Refusal
			if !errors.Is(err, ErrQueueFull) || !errors.As(err, &r) || r.RetryAfter <= 0 {
				t.Fatalf("the 65th queued: %v, want OVERLOADED with a retry hint", err)
			}
			a.Stop()
			b.Stop()
			for _, ch := range append(qa, qb...) {
				if r := <-ch; !errors.Is(r.err, ErrStopped) {
					t.Fatalf("queued: %v", r.err)
				}
			}
			releaseAll(pa)
		}},
		{"a process that dies holding shells leaves the whole budget", func(t *testing.T, a, b *Controller, la, _ *Ledger, stopA func()) {
			hold(t, a, Shell, 8) // never released: a dies holding them
			got := acquireAsync(b, Shell)
			until(t, "b's shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
			// The kernel drops a dead process's locks when the last
			// reference to its open file goes (descriptor and mapping):
			// dropping a's is that, without the process.
			stopA()
			_ = unix.Munmap(la.mem)
			_ = la.f.Close()
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			pb := append(hold(t, b, Shell, 7), r.p)
			m := b.Snapshot()
			if m.Service.Reclaimed != 1 || m.Service.Processes != 1 || m.Service.Shared || m.Active.Shell != 8 {
				t.Fatalf("after the death: service %+v, own %+v", m.Service, m.Active)
			}
			releaseAll(pb)
		}},
		{"a process that leaves frees its share; alone again", func(t *testing.T, a, b *Controller, _, _ *Ledger, _ func()) {
			pa := hold(t, a, Shell, 8)
			got := acquireAsync(b, Shell)
			until(t, "b's shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
			releaseAll(pa)
			if err := a.Leave(); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			until(t, "b alone", func() bool { return !b.Shared() })
			releaseAll(append(hold(t, b, Shell, 7), r.p))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b, la, lb, stopA := sharedPair(t, lim)
			tc.run(t, a, b, la, lb, stopA)
		})
	}
}

// TestADeadProcessesShareWaitsForItsCgroup: a process that died may leave
// commands running in its cgroup for a moment (systemd kills them when
// its main process is gone); its share is reclaimed once the cgroup holds
// none, not before. Files shaped like a cgroup v2 tree stand in for the
// two slots' units.
func TestADeadProcessesShareWaitsForItsCgroup(t *testing.T) {
	root := t.TempDir()
	procs := map[string]string{}
	for _, unit := range []string{"a.service", "b.service"} {
		cg := filepath.Join(root, "mcp-backend.slice", unit)
		if err := os.MkdirAll(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, filepath.Join(cg, "cgroup.events"), "populated 1\nfrozen 0\n")
		procs[unit] = filepath.Join(root, "proc-"+unit)
		writeTestFile(t, procs[unit], "0::/mcp-backend.slice/"+unit+"\n")
	}
	a, b, la, _, stopA := sharedPairOf(t, defaults(), func(t testing.TB, dir string) (*Ledger, *Ledger) {
		return mustOpen(t, dir, root, procs["a.service"]), mustOpen(t, dir, root, procs["b.service"])
	})
	hold(t, a, Shell, 8) // never released: a dies holding them
	got := acquireAsync(b, Shell)
	until(t, "b's shell queued", func() bool { _, q := b.Occupancy(); return q == 1 })
	stopA()
	_ = unix.Munmap(la.mem)
	_ = la.f.Close()
	// Dead, its cgroup still populated: b looks again and again and keeps
	// counting a's share.
	looked := b.sh.looks.Load()
	until(t, "b looked 20 more times", func() bool { return b.sh.looks.Load() >= looked+20 })
	select {
	case r := <-got:
		t.Fatalf("b started a shell while the dead one's commands may run: %+v", r)
	default:
	}
	if m := b.Snapshot(); m.Service.Reclaimed != 0 || m.Service.Active.Shell != 8 {
		t.Fatalf("before the cgroup emptied: service %+v", m.Service)
	}
	writeTestFile(t, filepath.Join(root, "mcp-backend.slice", "a.service", "cgroup.events"), "populated 0\nfrozen 0\n")
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if m := b.Snapshot(); m.Service.Reclaimed != 1 || m.Service.Processes != 1 {
		t.Fatalf("after the cgroup emptied: service %+v", m.Service)
	}
	r.p.Release()
}

func writeTestFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAcquireReleaseShared is the uncontended acquire and release
// while another process shares the limits: each decision takes the
// ledger's lock (a system call each way). Alone, a controller with a
// ledger decides as BenchmarkAcquireRelease does.
func BenchmarkAcquireReleaseShared(b *testing.B) {
	a, _, _, _, _ := sharedPair(b, defaults())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := a.Acquire(ctx, Normal)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}
