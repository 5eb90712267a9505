package admission

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

func defaults() Limits {
	return Limits{MaxActive: 48, ReservedControl: 8, MaxShell: 8, MaxQueue: 64, QueueWait: 30 * time.Second}
}

// hold acquires n permits of kind k that must be granted at once.
func hold(t testing.TB, c *Controller, k Kind, n int) []*Permit {
	t.Helper()
	ps := make([]*Permit, 0, n)
	for i := 0; i < n; i++ {
		// With capacity free Acquire must not wait at all; the bound only
		// keeps a wrongly queued call from hanging the test. A short one
		// expired before Acquire ran on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, err := c.Acquire(ctx, k)
		cancel()
		if err != nil {
			t.Fatalf("acquire %v #%d: %v (snapshot %+v)", k, i, err, c.Snapshot())
		}
		ps = append(ps, p)
	}
	return ps
}

func releaseAll(ps []*Permit) {
	for _, p := range ps {
		p.Release()
	}
}

// result of an Acquire that ran in the background.
type result struct {
	p   *Permit
	err error
}

// enqueue starts an Acquire in the background and waits until it is queued.
func enqueue(t testing.TB, ctx context.Context, c *Controller, k Kind) <-chan result {
	t.Helper()
	// Per class: a control operation may take a normal one's place, which
	// leaves the total as it was.
	queued := func() int64 {
		if q := c.Snapshot().Queued; k == Control {
			return q.Control
		} else {
			return q.NonControl
		}
	}
	before := queued()
	ch := make(chan result, 1)
	go func() {
		p, err := c.Acquire(ctx, k)
		ch <- result{p, err}
	}()
	waitFor(t, func() bool { return queued() > before }, "operation queued")
	return ch
}

// waitFor polls a condition; it bounds a wait, it does not time anything.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// pending asserts that the operation is still waiting.
func pending(t testing.TB, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("operation finished while it must still wait: %+v", r)
	default:
	}
}

func get(t testing.TB, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no result")
		return result{}
	}
}

func assertIdle(t testing.TB, c *Controller) {
	t.Helper()
	s := c.Snapshot()
	if s.Active != (mcpwire.Active{}) || s.Queued != (mcpwire.Queued{}) {
		t.Fatalf("not idle: active %+v queued %+v", s.Active, s.Queued)
	}
	if s.Counters.Accepted != s.Counters.Completed {
		t.Fatalf("accepted %d != completed %d", s.Counters.Accepted, s.Counters.Completed)
	}
}

func TestKindOf(t *testing.T) {
	tests := map[string]Kind{
		"system.info": Control, "process.list": Control, "service.status": Control,
		"process.kill": Control, "service.control": Control,
		"shell.exec": Shell, "file.read": Normal, "file.write": Normal, "file.list": Normal, "unknown": Normal,
	}
	for tool, want := range tests {
		if got := KindOf(tool); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", tool, got, want)
		}
	}
}

func TestGlobalCap(t *testing.T) {
	c := New(defaults())
	normal := hold(t, c, Normal, 40)
	control := hold(t, c, Control, 8)
	if got := c.Snapshot().Active.Total; got != 48 {
		t.Fatalf("active = %d, want 48", got)
	}
	// A 49th operation of any kind must wait.
	ctx, cancel := context.WithCancel(context.Background())
	ch := enqueue(t, ctx, c, Control)
	pending(t, ch)
	control[0].Release()
	r := get(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.p.Release()
	cancel()
	releaseAll(normal)
	releaseAll(control[1:])
	assertIdle(t, c)
}

func TestReservedControlSlotsUsableWhileNonControlSaturated(t *testing.T) {
	c := New(defaults())
	normal := hold(t, c, Normal, 40)
	// Normal work is at its share: more normal work queues...
	ctx := context.Background()
	ch := enqueue(t, ctx, c, Normal)
	// ...while control work still starts at once, up to the reserve.
	control := hold(t, c, Control, 8)
	s := c.Snapshot()
	if s.Active.NonControl != 40 || s.Active.Control != 8 || s.Queued.NonControl != 1 {
		t.Fatalf("snapshot %+v %+v", s.Active, s.Queued)
	}
	pending(t, ch)
	// Freeing a control slot does not let normal work past its share.
	control[0].Release()
	pending(t, ch)
	normal[0].Release()
	r := get(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.p.Release()
	releaseAll(normal[1:])
	releaseAll(control[1:])
	assertIdle(t, c)
}

func TestShellCap(t *testing.T) {
	c := New(defaults())
	shells := hold(t, c, Shell, 8)
	ch := enqueue(t, context.Background(), c, Shell)
	// Other normal work is not held back by the shell cap.
	others := hold(t, c, Normal, 32)
	if s := c.Snapshot(); s.Active.Shell != 8 || s.Peak.Shell != 8 || s.Active.NonControl != 40 {
		t.Fatalf("active %+v peak %+v", s.Active, s.Peak)
	}
	pending(t, ch)
	shells[0].Release()
	r := get(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if s := c.Snapshot(); s.Peak.Shell != 8 {
		t.Fatalf("peak shell %d exceeds 8", s.Peak.Shell)
	}
	r.p.Release()
	releaseAll(shells[1:])
	releaseAll(others)
	assertIdle(t, c)
}

func TestQueueBoundRejectsAtOnce(t *testing.T) {
	lim := defaults()
	lim.MaxQueue = 3
	c := New(lim)
	ps := hold(t, c, Normal, 40)
	ctx, cancel := context.WithCancel(context.Background())
	var chs []<-chan result
	for i := 0; i < 3; i++ {
		chs = append(chs, enqueue(t, ctx, c, Normal))
	}
	if !c.Full() {
		t.Fatal("queue of 3 with 3 waiters must be full")
	}
	// The next one is rejected without waiting: a cancelled-never context
	// and a long queue wait would hang here if it queued.
	if _, err := c.Acquire(context.Background(), Normal); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	// Control work that cannot start is queued in the same bounded queue;
	// when normal work filled it, control takes the youngest one's place.
	controls := hold(t, c, Control, 8)
	ctl := enqueue(t, ctx, c, Control)
	if r := get(t, chs[2]); !errors.Is(r.err, ErrQueueFull) || !errors.Is(r.err, ErrPreempted) {
		t.Fatalf("youngest normal: err = %v, want ErrPreempted (an ErrQueueFull)", r.err)
	}
	if got := c.Snapshot().Counters; got.Rejected != 2 || got.Preempted != 1 {
		t.Fatalf("counters %+v, want rejected 2, preempted 1", got)
	}
	cancel()
	for _, ch := range []<-chan result{chs[0], chs[1], ctl} {
		if r := get(t, ch); !errors.Is(r.err, ErrCancelled) {
			t.Fatalf("err = %v", r.err)
		}
	}
	if c.Full() {
		t.Fatal("queue still full after cancellations")
	}
	releaseAll(ps)
	releaseAll(controls)
	assertIdle(t, c)
}

// TestControlPreemptsYoungestNormal: a control operation arriving at a queue
// full of normal and shell work takes the place of the youngest of them,
// which is refused at once; the older ones keep their place and order. Only
// a queue full of control work refuses control work.
func TestControlPreemptsYoungestNormal(t *testing.T) {
	lim := Limits{MaxActive: 4, ReservedControl: 1, MaxShell: 1, MaxQueue: 3, QueueWait: time.Minute}
	c := New(lim)
	ps := hold(t, c, Normal, 3)
	ps = append(ps, hold(t, c, Control, 1)...)
	ctx := context.Background()
	oldest := enqueue(t, ctx, c, Shell)
	middle := enqueue(t, ctx, c, Normal)
	youngest := enqueue(t, ctx, c, Shell)

	c1 := enqueue(t, ctx, c, Control) // takes youngest's place
	if r := get(t, youngest); !errors.Is(r.err, ErrPreempted) || r.p != nil {
		t.Fatalf("youngest: %+v, want ErrPreempted", r)
	}
	c2 := enqueue(t, ctx, c, Control) // takes middle's place
	if r := get(t, middle); !errors.Is(r.err, ErrPreempted) {
		t.Fatalf("middle: %+v, want ErrPreempted", r)
	}
	pending(t, oldest)
	c3 := enqueue(t, ctx, c, Control) // takes oldest's place
	if r := get(t, oldest); !errors.Is(r.err, ErrPreempted) {
		t.Fatalf("oldest: %+v, want ErrPreempted", r)
	}
	// The queue holds only control work now: control is refused too.
	if c.Shed(Control) == false {
		t.Fatal("Shed(Control) = false with a queue full of control work")
	}
	if _, err := c.Acquire(ctx, Control); !errors.Is(err, ErrQueueFull) || errors.Is(err, ErrPreempted) {
		t.Fatalf("control at a queue full of control: %v, want ErrQueueFull", err)
	}
	s := c.Snapshot()
	if s.Counters.Preempted != 3 || s.Counters.Rejected != 5 || s.Queued.Control != 3 || s.Queued.NonControl != 0 {
		t.Fatalf("snapshot %+v", s)
	}
	// Slots freed go to the control waiters in order.
	for _, ch := range []<-chan result{c1, c2, c3} {
		ps[0].Release()
		ps = ps[1:]
		r := get(t, ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		ps = append(ps, r.p)
	}
	releaseAll(ps)
	assertIdle(t, c)
	// accepted: 4 held + 3 control; rejected: 3 preempted + the control
	// refused by Acquire + the one refused by Shed.
	if s := c.Snapshot().Counters; s.Accepted != 7 || s.Rejected != 5 || s.Preempted != 3 {
		t.Fatalf("counters %+v, want accepted 7, rejected 5, preempted 3", s)
	}
}

// TestShedControlWithNormalQueued: Shed never refuses control work that
// Acquire would queue in a normal operation's place.
func TestShedControlWithNormalQueued(t *testing.T) {
	lim := Limits{MaxActive: 2, ReservedControl: 1, MaxShell: 1, MaxQueue: 1, QueueWait: time.Minute}
	c := New(lim)
	ps := append(hold(t, c, Normal, 1), hold(t, c, Control, 1)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := enqueue(t, ctx, c, Normal)
	if !c.Shed(Normal) {
		t.Fatal("normal not shed at a full queue")
	}
	if c.Shed(Control) {
		t.Fatal("control shed although it would take a normal operation's place")
	}
	ctl := enqueue(t, ctx, c, Control)
	if r := get(t, n); !errors.Is(r.err, ErrPreempted) {
		t.Fatalf("normal: %+v", r)
	}
	cancel()
	if r := get(t, ctl); !errors.Is(r.err, ErrCancelled) {
		t.Fatalf("control: %+v", r)
	}
	releaseAll(ps)
	assertIdle(t, c)
}

// TestPreemptRace: control work preempting queued normal work while grants,
// cancellations and timeouts race it. No slot or queue place is stranded,
// every operation ends in exactly one outcome, control work is refused only
// by a queue full of control work, and preemption really happened.
func TestPreemptRace(t *testing.T) {
	lim := Limits{MaxActive: 4, ReservedControl: 1, MaxShell: 1, MaxQueue: 4, QueueWait: 3 * time.Millisecond}
	c := New(lim)
	const workers, perWorker = 32, 300
	var ok, full, preempted, timeout, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < perWorker; i++ {
				k := Kind(rng.IntN(3))
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(3) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
				}
				p, err := c.Acquire(ctx, k)
				switch {
				case err == nil:
					ok.Add(1)
					if rng.IntN(2) == 0 {
						time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
					}
					p.Release()
				case errors.Is(err, ErrPreempted):
					if k == Control {
						t.Errorf("control operation preempted")
					}
					preempted.Add(1)
					full.Add(1)
				case errors.Is(err, ErrQueueFull):
					full.Add(1)
				case errors.Is(err, ErrQueueTimeout):
					timeout.Add(1)
				case errors.Is(err, ErrCancelled):
					cancelled.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
				cancel()
			}
		}(uint64(g))
	}
	wg.Wait()
	s := c.Snapshot()
	assertIdle(t, c)
	if got := ok.Load() + full.Load() + timeout.Load() + cancelled.Load(); got != workers*perWorker {
		t.Fatalf("outcomes %d != operations %d", got, workers*perWorker)
	}
	if s.Counters.Accepted != ok.Load() || s.Counters.Rejected != full.Load() || s.Counters.Preempted != preempted.Load() ||
		s.Counters.TimedOut != timeout.Load() || s.Counters.Cancelled != cancelled.Load() {
		t.Fatalf("counters %+v vs ok=%d full=%d preempted=%d timeout=%d cancelled=%d", s.Counters, ok.Load(), full.Load(), preempted.Load(), timeout.Load(), cancelled.Load())
	}
	if s.Peak.Active > int64(lim.MaxActive) || s.Peak.Queued > int64(lim.MaxQueue) || s.Peak.NonControl > int64(lim.MaxNonControl()) {
		t.Fatalf("peaks %+v exceed limits", s.Peak)
	}
	releaseAll(hold(t, c, Normal, lim.MaxNonControl()))
	releaseAll(hold(t, c, Control, lim.MaxActive))
	t.Logf("counters %+v", s.Counters)
	if preempted.Load() == 0 || timeout.Load() == 0 || cancelled.Load() == 0 {
		t.Fatalf("the race test must exercise preemption, timeouts and cancellations: %+v", s.Counters)
	}
}

func TestQueueWaitTimeout(t *testing.T) {
	lim := defaults()
	lim.QueueWait = 20 * time.Millisecond
	c := New(lim)
	ps := hold(t, c, Shell, 8)
	r := get(t, enqueue(t, context.Background(), c, Shell))
	if !errors.Is(r.err, ErrQueueTimeout) || r.p != nil {
		t.Fatalf("got %+v, want ErrQueueTimeout and no permit", r)
	}
	s := c.Snapshot()
	if s.Counters.TimedOut != 1 || s.Queued.Total != 0 || s.Active.Shell != 8 {
		t.Fatalf("counters %+v queued %+v active %+v", s.Counters, s.Queued, s.Active)
	}
	releaseAll(ps)
	assertIdle(t, c)
}

func TestCancelWhileQueuedTakesNoSlot(t *testing.T) {
	c := New(defaults())
	ps := hold(t, c, Normal, 40)
	ctx, cancel := context.WithCancel(context.Background())
	ch := enqueue(t, ctx, c, Normal)
	before := c.Snapshot()
	cancel()
	r := get(t, ch)
	if !errors.Is(r.err, ErrCancelled) || r.p != nil {
		t.Fatalf("got %+v, want ErrCancelled", r)
	}
	after := c.Snapshot()
	if after.Counters.Cancelled != 1 || after.Queued.Total != 0 || after.Counters.Accepted != before.Counters.Accepted || after.Active != before.Active {
		t.Fatalf("before %+v after %+v", before, after)
	}
	releaseAll(ps)
	assertIdle(t, c)
}

// TestStopEmptiesTheQueueAndGrantsNothing: at shutdown queued operations
// leave at once, counted cancelled, and slots that running operations free
// afterwards are handed to no one; later Acquires are refused.
func TestStopEmptiesTheQueueAndGrantsNothing(t *testing.T) {
	c := New(defaults())
	normal := hold(t, c, Normal, 40)
	control := hold(t, c, Control, 8)
	var waiting []<-chan result
	for range 3 {
		waiting = append(waiting, enqueue(t, context.Background(), c, Normal))
	}
	waiting = append(waiting, enqueue(t, context.Background(), c, Control))
	before := c.Snapshot()
	c.Stop()
	for i, ch := range waiting {
		if r := get(t, ch); !errors.Is(r.err, ErrStopped) || r.p != nil {
			t.Fatalf("queued operation %d: got %+v, want ErrStopped", i, r)
		}
	}
	releaseAll(normal[:1]) // a running operation ends: its slot goes to no one
	if _, err := c.Acquire(context.Background(), Control); !errors.Is(err, ErrStopped) {
		t.Fatalf("Acquire after Stop with a slot free = %v, want ErrStopped", err)
	}
	releaseAll(normal[1:])
	releaseAll(control)
	c.Stop() // idempotent
	after := c.Snapshot()
	if after.Counters.Cancelled != before.Counters.Cancelled+5 || after.Counters.Accepted != before.Counters.Accepted {
		t.Fatalf("counters before %+v after %+v: want 5 more cancelled, no more accepted", before.Counters, after.Counters)
	}
	assertIdle(t, c)
}

func TestControlPriorityOverEarlierQueuedNormal(t *testing.T) {
	c := New(defaults())
	ps := hold(t, c, Normal, 40)
	cs := hold(t, c, Control, 8)
	normal := enqueue(t, context.Background(), c, Normal)
	control := enqueue(t, context.Background(), c, Control)
	// One slot frees: a normal one. Queued control goes first although it
	// came later.
	ps[0].Release()
	r := get(t, control)
	if r.err != nil {
		t.Fatal(r.err)
	}
	pending(t, normal)
	r.p.Release()
	rn := get(t, normal)
	if rn.err != nil {
		t.Fatal(rn.err)
	}
	rn.p.Release()
	releaseAll(ps[1:])
	releaseAll(cs)
	assertIdle(t, c)
}

func TestNoHeadOfLineBlocking(t *testing.T) {
	c := New(defaults())
	shells := hold(t, c, Shell, 8)
	others := hold(t, c, Normal, 32)
	// A shell waiter at the head, a file operation behind it.
	shell := enqueue(t, context.Background(), c, Shell)
	file := enqueue(t, context.Background(), c, Normal)
	// A non-shell slot frees: the shell waiter cannot use it (shell cap),
	// the file operation behind it must start.
	others[0].Release()
	r := get(t, file)
	if r.err != nil {
		t.Fatal(r.err)
	}
	pending(t, shell)
	// Another non-shell slot frees: the shell cap still holds the shell
	// waiter. (Releasing a shell first would leave both caps open, and the
	// waiter would rightly start.)
	r.p.Release()
	pending(t, shell)
	shells[0].Release()
	rs := get(t, shell)
	if rs.err != nil {
		t.Fatal(rs.err)
	}
	rs.p.Release()
	releaseAll(shells[1:])
	releaseAll(others[1:])
	assertIdle(t, c)
}

// TestCeilingNotSerializer: with capacity free, work starts at once: 100
// concurrent normal operations run exactly 40 at a time, and the rest start
// as slots free.
func TestCeilingNotSerializer(t *testing.T) {
	lim := defaults()
	lim.MaxQueue = 100
	c := New(lim)
	var running, peak, done atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.Acquire(context.Background(), Normal)
			if err != nil {
				t.Error(err)
				return
			}
			setMax(&peak, running.Add(1))
			<-release
			running.Add(-1)
			done.Add(1)
			p.Release()
		}()
	}
	waitFor(t, func() bool { return running.Load() == 40 && c.Snapshot().Queued.Total == 60 }, "40 running, 60 queued")
	close(release)
	wg.Wait()
	if peak.Load() != 40 || done.Load() != 100 {
		t.Fatalf("peak %d done %d, want 40 and 100", peak.Load(), done.Load())
	}
	if s := c.Snapshot(); s.Peak.NonControl != 40 || s.Counters.Accepted != 100 {
		t.Fatalf("snapshot %+v", s)
	}
	assertIdle(t, c)
}

// TestGrantCancelRace: thousands of operations with random cancellations and
// timeouts over many goroutines; afterwards no slot is stranded, and each
// operation ended in exactly one outcome.
func TestGrantCancelRace(t *testing.T) {
	lim := Limits{MaxActive: 6, ReservedControl: 2, MaxShell: 2, MaxQueue: 16, QueueWait: 2 * time.Millisecond}
	c := New(lim)
	const workers, perWorker = 32, 300
	var ok, full, timeout, cancelled atomic.Int64
	var over atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < perWorker; i++ {
				k := Kind(rng.IntN(3))
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(3) == 0 {
					d := time.Duration(rng.IntN(300)) * time.Microsecond
					time.AfterFunc(d, cancel)
				}
				p, err := c.Acquire(ctx, k)
				switch {
				case err == nil:
					s := c.Snapshot()
					if s.Active.Total > int64(lim.MaxActive) || s.Active.NonControl > int64(lim.MaxNonControl()) || s.Active.Shell > int64(lim.MaxShell) {
						over.Store(true)
					}
					ok.Add(1)
					if rng.IntN(2) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
					p.Release()
				case errors.Is(err, ErrQueueFull):
					full.Add(1)
				case errors.Is(err, ErrQueueTimeout):
					timeout.Add(1)
				case errors.Is(err, ErrCancelled):
					cancelled.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
				cancel()
			}
		}(uint64(g))
	}
	wg.Wait()
	if over.Load() {
		t.Fatal("a limit was exceeded")
	}
	s := c.Snapshot()
	assertIdle(t, c)
	total := int64(workers * perWorker)
	if got := ok.Load() + full.Load() + timeout.Load() + cancelled.Load(); got != total {
		t.Fatalf("outcomes %d != operations %d", got, total)
	}
	if s.Counters.Accepted != ok.Load() || s.Counters.Rejected != full.Load() || s.Counters.TimedOut != timeout.Load() || s.Counters.Cancelled != cancelled.Load() {
		t.Fatalf("counters %+v vs ok=%d full=%d timeout=%d cancelled=%d", s.Counters, ok.Load(), full.Load(), timeout.Load(), cancelled.Load())
	}
	if s.Peak.Active > int64(lim.MaxActive) || s.Peak.Shell > int64(lim.MaxShell) || s.Peak.NonControl > int64(lim.MaxNonControl()) || s.Peak.Queued > int64(lim.MaxQueue) {
		t.Fatalf("peaks %+v exceed limits", s.Peak)
	}
	// Every slot is free: the full capacity can be taken again at once.
	releaseAll(hold(t, c, Normal, lim.MaxNonControl()))
	t.Logf("ok=%d full=%d timeout=%d cancelled=%d", ok.Load(), full.Load(), timeout.Load(), cancelled.Load())
	if timeout.Load() == 0 || cancelled.Load() == 0 || full.Load() == 0 {
		t.Fatalf("the race test must exercise every outcome: %+v", s.Counters)
	}
}

func TestDoubleReleasePanics(t *testing.T) {
	c := New(defaults())
	p := hold(t, c, Normal, 1)[0]
	p.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("second Release did not panic")
		}
		assertIdle(t, c)
	}()
	p.Release()
}

func TestZeroQueueRejectsAtOnce(t *testing.T) {
	lim := defaults()
	lim.MaxQueue = 0
	c := New(lim)
	if c.Full() {
		t.Fatal("idle controller with maxQueue 0 reported full")
	}
	ps := hold(t, c, Shell, 8)
	if _, err := c.Acquire(context.Background(), Shell); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v", err)
	}
	if c.Full() {
		t.Fatal("full although normal work can still start")
	}
	ps = append(ps, hold(t, c, Normal, 32)...)
	if !c.Full() {
		t.Fatal("not full with every normal slot taken and no queue")
	}
	releaseAll(ps)
}

// TestShedAgreesWithAcquire: Shed refuses exactly what Acquire would refuse
// at once, and counts it as rejected.
func TestShedAgreesWithAcquire(t *testing.T) {
	lim := defaults()
	lim.MaxQueue = 1
	c := New(lim)
	if c.Shed(Shell) {
		t.Fatal("shed with capacity free")
	}
	shells := hold(t, c, Shell, 8)
	if c.Shed(Shell) {
		t.Fatal("shed with the queue not full")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := enqueue(t, ctx, c, Shell)
	if !c.Shed(Shell) {
		t.Fatal("shell not shed with shells and queue full")
	}
	if c.Shed(Normal) || c.Shed(Control) {
		t.Fatal("startable work shed")
	}
	if got := c.Snapshot().Counters.Rejected; got != 1 {
		t.Fatalf("rejected = %d, want 1", got)
	}
	cancel()
	get(t, ch)
	releaseAll(shells)
	assertIdle(t, c)
}
