package jobs

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

func testLimits() Limits {
	return Limits{
		MaxRunning: 8, MaxRunningPerConversation: 8, MaxKept: 100, KeepFor: time.Hour,
		OutputBytes: 1000, TotalOutputBytes: 100000, DefaultTimeout: time.Minute, MaxTimeout: time.Hour,
		MemoryMax: 1 << 30, TasksMax: 100, MaxWaiters: 4,
	}
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func open(t testing.TB, dir string, lim Limits, now func() time.Time) *Manager {
	t.Helper()
	m, err := Open(context.Background(), Options{Dir: dir, Shell: "/bin/sh", Limits: lim, Runner: NewProcessRunner(), Now: now, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func who(id string) caller.Caller {
	return caller.Caller{Principal: caller.Principal{Kind: caller.Asserted, ID: id}, Conversation: "c"}
}

var operator = caller.Caller{Principal: caller.Principal{Kind: caller.Operator, ID: "operator"}}

func start(t testing.TB, m *Manager, c caller.Caller, cmd string) mcpwire.JobStatus {
	t.Helper()
	st, _, err := m.Start(context.Background(), c, StartRequest{Command: cmd, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func finish(t testing.TB, m *Manager, c caller.Caller, id string) mcpwire.JobStatus {
	t.Helper()
	st, why, err := m.Wait(context.Background(), c, id, time.Now().Add(20*time.Second))
	if err != nil || why != "done" {
		t.Fatalf("wait %s: %s %v", id, why, err)
	}
	return st
}

// The operator sees and cancels every principal's jobs; others only their
// own.
func TestOperatorSeesAll(t *testing.T) {
	m := open(t, t.TempDir(), testLimits(), nil)
	a := start(t, m, who("alice"), "sleep 30")
	start(t, m, who("bob"), "true")
	if n := len(m.List(operator)); n != 2 {
		t.Fatalf("operator lists %d jobs, want 2", n)
	}
	if n := len(m.List(who("alice"))); n != 1 {
		t.Fatalf("alice lists %d jobs, want 1", n)
	}
	if _, err := m.Status(who("bob"), a.ID); toolerr.As(err).Code != mcpwire.CodeNotFound {
		t.Fatalf("bob's status of alice's job: %v", err)
	}
	st, err := m.Cancel(context.Background(), operator, a.ID)
	if err != nil || st.State != mcpwire.JobCancelled {
		t.Fatalf("operator's cancel: %+v %v", st, err)
	}
}

// Finished jobs are dropped by age and by count, oldest first, and the
// output budget counts each running job at its cap.
func TestRetention(t *testing.T) {
	clk := &clock{now: time.Now()}
	lim := testLimits()
	lim.MaxKept = 2
	lim.TotalOutputBytes = 2500 // two jobs at their cap and a little
	m := open(t, t.TempDir(), lim, clk.Now)
	var ids []string
	for range 3 {
		st := start(t, m, who("a"), "printf 0123456789")
		finish(t, m, who("a"), st.ID)
		ids = append(ids, st.ID)
		clk.add(time.Second)
	}
	// The third start dropped the first: two kept.
	if _, err := m.Status(who("a"), ids[0]); toolerr.As(err).Code != mcpwire.CodeNotFound {
		t.Fatalf("oldest job still kept: %v", err)
	}
	if k := m.Metrics().Kept; k != 2 {
		t.Fatalf("kept %d, want 2", k)
	}
	// Two running jobs at their cap plus one more would pass the budget
	// with the kept ones: those go, the running ones stay.
	r1 := start(t, m, who("a"), "sleep 30")
	r2 := start(t, m, who("a"), "sleep 30")
	if _, _, err := m.Start(context.Background(), who("a"), StartRequest{Command: "true"}); toolerr.As(err).Code != mcpwire.CodeOverloaded {
		t.Fatalf("start past the output budget: %v", err)
	}
	if mt := m.Metrics(); mt.Running != 2 || mt.Kept != 0 || mt.Refused != 1 {
		t.Fatalf("metrics %+v", mt)
	}
	for _, id := range []string{r1.ID, r2.ID} {
		if _, err := m.Cancel(context.Background(), who("a"), id); err != nil {
			t.Fatal(err)
		}
	}
	// Age: an hour later every finished job is gone.
	clk.add(2 * time.Hour)
	until := time.Now().Add(5 * time.Second)
	for m.Metrics().Kept != 0 && time.Now().Before(until) {
		time.Sleep(10 * time.Millisecond)
	}
	if k := m.Metrics().Kept; k != 0 {
		t.Fatalf("kept %d after keepFor", k)
	}
}

// A process-mode job of an earlier backend process is lost, and its record
// is written once: the supervisor's never replaces it, nor the reverse.
func TestProcessModeRestartLosesRunningJobs(t *testing.T) {
	dir := t.TempDir()
	m1, err := Open(context.Background(), Options{Dir: dir, Shell: "/bin/sh", Limits: testLimits(), Runner: NewProcessRunner()})
	if err != nil {
		t.Fatal(err)
	}
	done := start(t, m1, who("a"), "exit 4")
	finish(t, m1, who("a"), done.ID)
	run := start(t, m1, who("a"), "sleep 30")
	// A second manager over the same directory while the first still
	// runs the job: as a new process would find it after a crash.
	m2 := open(t, dir, testLimits(), nil)
	st, err := m2.Status(who("a"), run.ID)
	if err != nil || st.State != mcpwire.JobLost {
		t.Fatalf("running job of the earlier process: %+v %v", st, err)
	}
	if st, _ := m2.Status(who("a"), done.ID); st.State != mcpwire.JobExited || *st.ExitCode != 4 {
		t.Fatalf("finished job: %+v", st)
	}
	m1.Close() // its supervisor ends the group and tries to record
	ex, ok, err := readExit(filepath.Join(root(dir), run.ID))
	if err != nil || !ok || ex.State != mcpwire.JobLost {
		t.Fatalf("record after the first process closed: %+v %v %v", ex, ok, err)
	}
}

// Waits are bounded by MaxWaiters.
func TestWaitersBounded(t *testing.T) {
	lim := testLimits()
	lim.MaxWaiters = 1
	m := open(t, t.TempDir(), lim, nil)
	st := start(t, m, who("a"), "sleep 30")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _, _ = m.Wait(ctx, who("a"), st.ID, time.Now().Add(time.Minute)) }()
	for m.Waiters() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, _, err := m.Wait(context.Background(), who("a"), st.ID, time.Now().Add(time.Minute)); toolerr.As(err).Code != mcpwire.CodeOverloaded {
		t.Fatalf("second waiter: %v", err)
	}
}

// BenchmarkStartProcessMode is the cost of job.start's work in process
// mode: state written, supervisor and shell started (the shell exits at
// once).
func BenchmarkStartProcessMode(b *testing.B) {
	lim := testLimits()
	lim.MaxKept = 100000
	lim.TotalOutputBytes = 1 << 40
	lim.MaxRunning, lim.MaxRunningPerConversation = 1024, 1024
	m := open(b, b.TempDir(), lim, nil)
	env := os.Environ()
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := m.Start(context.Background(), who("a"), StartRequest{Command: "true", Env: env}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOnEndToldOnce: every job's end is told exactly once, by the process
// that sees it first: a job that ended under one manager is not told
// again by the next one to open the directory, and one that ended while no
// manager watched is told by the next one.
func TestOnEndToldOnce(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	told := map[string]int{}
	onEnd := func(spec Spec, st mcpwire.JobStatus) {
		mu.Lock()
		told[spec.ID+" "+st.State]++
		mu.Unlock()
	}
	openTold := func() *Manager {
		m, err := Open(context.Background(), Options{Dir: dir, Shell: "/bin/sh", Limits: testLimits(), Runner: NewProcessRunner(), Poll: 10 * time.Millisecond, OnEnd: onEnd})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1 := openTold()
	a := start(t, m1, who("a"), "exit 3")
	finish(t, m1, who("a"), a.ID)
	b := start(t, m1, who("a"), "sleep 30")
	m1.Close() // b ends with the process: lost
	m2 := openTold()
	defer m2.Close()
	mu.Lock()
	defer mu.Unlock()
	if told[a.ID+" "+mcpwire.JobExited] != 1 || told[b.ID+" "+mcpwire.JobLost] != 1 || len(told) != 2 {
		t.Fatalf("told %v, want each job's end once", told)
	}
}
