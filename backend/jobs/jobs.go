// Package jobs runs commands that outlive a tool call: a job is started by
// one call and read, waited for or cancelled by later ones, by the
// principal that started it. Under systemd every job is a transient unit in
// the jobs slice whose main process is the backend's own supervisor
// (`mcp-backend job-exec`), so a job has its own cgroup and limits, goes on
// through a cutover, a rollback or a crash of the backend, and records its
// own end; any later backend finds it in the state directory, which is
// the jobs' one source of truth for every backend process that opens it
// (both slots of a cutover: shared.go). Without
// systemd the same supervisor runs inside the backend and jobs end with it.
// Jobs are bounded: running jobs process-wide, shared fairly among
// principals and their conversations (share.go), kept jobs in count and
// age, output per job and in total.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Limits bound the jobs of one backend.
type Limits struct {
	MaxRunning                int           // running jobs, process-wide
	MaxRunningPerPrincipal    int           // running jobs of one principal, all its conversations
	MaxRunningPerConversation int           // running jobs of one conversation (of one principal)
	MaxKept                   int           // finished jobs kept; the oldest go first
	KeepFor                   time.Duration // a finished job is kept this long after it ended
	OutputBytes               int64         // stdout+stderr of one job
	TotalOutputBytes          int64         // output of every kept job on disk
	DefaultTimeout            time.Duration
	MaxTimeout                time.Duration
	MemoryMax                 int64 // bytes per job (systemd mode)
	TasksMax                  int64 // processes and threads per job (systemd mode)
	MaxWaiters                int   // job.wait calls waiting at once
	MaxWaitersPerPrincipal    int   // job.wait calls of one principal waiting at once
}

// Runner starts and stops the supervisor of a job: a transient unit under
// systemd, a goroutine of the backend without.
type Runner interface {
	Mode() string
	// Unit names the unit job id will run in ("" without units).
	Unit(id string) string
	// Check says whether jobs can run at all (the slice is installed).
	Check(ctx context.Context) error
	// Start starts the supervisor of the job in jobDir; it returns once
	// the job runs (or failed to start).
	Start(ctx context.Context, jobDir string, spec Spec) error
	// Stop stops the job's whole process tree.
	Stop(ctx context.Context, spec Spec) error
	// Ended says whether the job's supervisor is known not to run any
	// more (a unit systemd no longer has, a process mode job that returned
	// or is of an earlier process) and, when it is, how the job ended:
	// what the supervisor reaped (ok false: it left no record, the job is
	// lost). While the supervisor runs the job runs, whatever files say.
	// poll marks the manager's periodic check; other calls may be
	// answered from what is cheap to know.
	Ended(ctx context.Context, jobDir string, spec Spec, poll bool) (ex Exit, ok, ended bool, err error)
	// Close ends what must end with the backend (process mode).
	Close()
}

// Options configure a Manager.
type Options struct {
	Dir    string // state directory; the versioned layout lives below it
	Shell  string // shell.path
	Limits Limits
	Runner Runner
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Poll is how often running jobs are checked for their end; 200 ms
	// when zero.
	Poll time.Duration
	// OnEnd is told once of every job's end (the audit trail's job.end
	// record), by whichever process first sees it: a job that ended while
	// no backend ran is told by the next one to open the directory. Called
	// without the manager's lock.
	OnEnd func(spec Spec, st mcpwire.JobStatus)
}

// Manager owns the jobs of one state directory.
type Manager struct {
	opts Options
	lim  Limits
	log  *slog.Logger
	dir  string

	mu      sync.Mutex
	jobs    map[string]*job
	changed chan struct{} // closed and replaced whenever a job ends
	waiters map[flow]int  // job.wait calls waiting, per flow
	running *pool         // the shares of running jobs
	waiting *pool         // the shares of job.wait places
	// unreadable names job directories already warned about.
	unreadable map[string]bool

	started, refused atomic.Int64

	draining chan struct{} // closed by Drain: waits answer now
	drainOne sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	loopDone chan struct{}
}

type job struct {
	spec Spec
	dir  string
	exit *Exit
	// starting: counted against the caps, but its runner is not started
	// yet: nobody may judge it gone.
	starting bool
}

func (j *job) running() bool { return j.exit == nil }

// Open loads every job below opts.Dir, marks the ones whose runner is gone
// lost, and starts watching the running ones.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = 200 * time.Millisecond
	}
	m := &Manager{
		opts: opts, lim: opts.Limits, log: opts.Logger, dir: root(opts.Dir),
		jobs: map[string]*job{}, changed: make(chan struct{}), waiters: map[flow]int{}, unreadable: map[string]bool{},
		running: newPool("running jobs", "jobs.maxRunning", "jobs.maxRunningPerPrincipal", "jobs.maxRunningPerConversation",
			opts.Limits.MaxRunning, opts.Limits.MaxRunningPerPrincipal, opts.Limits.MaxRunningPerConversation),
		waiting: newPool("job.wait calls waiting", "jobs.maxWaiters", "jobs.maxWaitersPerPrincipal", "",
			opts.Limits.MaxWaiters, opts.Limits.MaxWaitersPerPrincipal, 0),
		draining: make(chan struct{}), stop: make(chan struct{}), loopDone: make(chan struct{}),
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("jobs: state directory: %w", err)
	}
	if _, err := os.ReadDir(m.dir); err != nil {
		return nil, fmt.Errorf("jobs: state directory: %w", err)
	}
	m.scanLocked()
	// A record on disk is believed only once the runner says the job's
	// supervisor is gone: a job may have written one itself.
	for _, j := range m.jobs {
		m.refreshCtx(ctx, j, true)
	}
	go m.loop()
	return m, nil
}

// toldFile marks a job whose end OnEnd was told of.
const toldFile = "end-told"

// told tells OnEnd of j's end unless a process did already.
func (m *Manager) told(j *job) {
	if m.opts.OnEnd == nil {
		return
	}
	p := filepath.Join(j.dir, toldFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // told already (or the directory is gone)
	}
	f.Close()
	m.mu.Lock()
	st := m.status(j)
	m.mu.Unlock()
	m.opts.OnEnd(j.spec, st)
}

// Mode is the runner's mode.
func (m *Manager) Mode() string { return m.opts.Runner.Mode() }

// Drain answers every waiting job.wait with the job's status now: the
// backend is shutting down, the jobs go on.
func (m *Manager) Drain() { m.drainOne.Do(func() { close(m.draining) }) }

// Close stops watching and ends what must end with the process (process
// mode jobs). Under systemd the jobs go on.
func (m *Manager) Close() {
	m.Drain()
	m.stopOnce.Do(func() {
		close(m.stop)
		<-m.loopDone
		m.opts.Runner.Close()
	})
}

// loop notices jobs ending: their supervisor returned (process mode) or
// their unit is gone (systemd).
func (m *Manager) loop() {
	defer close(m.loopDone)
	tick := time.NewTicker(m.opts.Poll)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		n++
		m.mu.Lock()
		if n%5 == 0 {
			// Jobs another process (the other slot) started or dropped.
			m.scanLocked()
		}
		var running []*job
		for _, j := range m.jobs {
			if j.running() && !j.starting {
				running = append(running, j)
			}
		}
		m.mu.Unlock()
		for _, j := range running {
			// Asking systemd costs a D-Bus call: once a second, or when
			// the supervisor may have written its record.
			m.refreshCtx(context.Background(), j, n%5 == 0)
		}
		m.prune()
	}
}

// refresh asks the runner whether j has ended; true when it has.
func (m *Manager) refresh(j *job) bool {
	return m.refreshCtx(context.Background(), j, false)
}

func (m *Manager) refreshCtx(ctx context.Context, j *job, poll bool) bool {
	m.mu.Lock()
	ended, starting := !j.running(), j.starting
	m.mu.Unlock()
	if ended {
		return true
	}
	if starting || startingElsewhere(j.dir, time.Now()) {
		return false // its runner is not started yet: nobody may judge it gone
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ex, ok, gone, err := m.opts.Runner.Ended(ctx, j.dir, j.spec, poll)
	if err != nil || !gone {
		return false
	}
	if !ok {
		msg := "the job's supervisor is gone without a record (the host rebooted, or it was killed)"
		if m.Mode() == mcpwire.JobModeProcess {
			msg = "the backend process that ran it ended"
		}
		ex = Exit{Version: FormatVersion, State: mcpwire.JobLost, Started: j.spec.Created, Ended: m.opts.Now().UTC(), Message: msg}
		if err := WriteExit(j.dir, ex); err != nil {
			m.log.Warn("jobs: record lost job", "job", j.spec.ID, "err", err)
		}
		m.log.Info("jobs: job lost", "job", j.spec.ID)
	}
	m.mu.Lock()
	first := j.exit == nil
	if first {
		j.exit = &ex
		close(m.changed)
		m.changed = make(chan struct{})
	}
	m.mu.Unlock()
	if first {
		m.told(j)
	}
	return true
}

// StartRequest is what job.start asks for.
type StartRequest struct {
	Command   string
	Cwd       string
	Env       []string // the complete environment
	Timeout   time.Duration
	MemoryMax int64
	TasksMax  int64
	IdemKey   string
	// Sandbox is the profile the job's shell runs in (nil: none).
	Sandbox *sandbox.Spec
}

// Start starts a job for c, or returns the job an earlier start with the
// same idempotency key made (reused true).
func (m *Manager) Start(ctx context.Context, c caller.Caller, r StartRequest) (mcpwire.JobStatus, bool, error) {
	if err := ctx.Err(); err != nil {
		return mcpwire.JobStatus{}, false, err
	}
	if r.Timeout <= 0 {
		r.Timeout = m.lim.DefaultTimeout
	}
	if r.Timeout > m.lim.MaxTimeout {
		r.Timeout = m.lim.MaxTimeout
	}
	if r.MemoryMax <= 0 || r.MemoryMax > m.lim.MemoryMax {
		r.MemoryMax = m.lim.MemoryMax
	}
	if r.TasksMax <= 0 || r.TasksMax > m.lim.TasksMax {
		r.TasksMax = m.lim.TasksMax
	}
	owner := c.Principal.Key()
	// The key and the caps are decided over every process's jobs, and the
	// new job is on disk before another process may decide again.
	unlock, err := m.lockDir()
	if err != nil {
		m.refused.Add(1)
		return mcpwire.JobStatus{}, false, toolerr.New(mcpwire.CodeUnavailable, "%v", err)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	// Jobs that ended since the last poll must not count against the caps.
	m.mu.Lock()
	m.scanLocked()
	var running []*job
	for _, j := range m.jobs {
		if j.running() {
			running = append(running, j)
		}
	}
	m.mu.Unlock()
	for _, j := range running {
		m.refresh(j)
	}
	m.mu.Lock()
	if r.IdemKey != "" {
		for _, j := range m.jobs {
			if j.spec.Owner == owner && j.spec.IdemKey == r.IdemKey {
				st := m.status(j)
				m.mu.Unlock()
				return st, true, nil
			}
		}
	}
	held := map[flow]int{}
	for _, j := range m.jobs {
		if j.running() {
			held[flow{j.spec.Owner, j.spec.Conversation}]++
		}
	}
	if why := m.running.admit(held, flowOf(c), m.opts.Now()); why != "" {
		m.mu.Unlock()
		m.refused.Add(1)
		return mcpwire.JobStatus{}, false, toolerr.New(mcpwire.CodeOverloaded, "jobs: %s; wait for one to end (job.wait) or cancel one", why)
	}
	if err := m.makeRoomLocked(); err != nil {
		m.mu.Unlock()
		m.refused.Add(1)
		return mcpwire.JobStatus{}, false, err
	}
	spec := Spec{
		Version: FormatVersion, ID: newID(), Owner: owner, Conversation: c.Conversation, IdemKey: r.IdemKey,
		Command: r.Command, Shell: m.opts.Shell, Cwd: r.Cwd,
		TimeoutMs: r.Timeout.Milliseconds(), OutputBytes: m.lim.OutputBytes,
		MemoryMax: r.MemoryMax, TasksMax: r.TasksMax,
		Mode: m.Mode(), Created: m.opts.Now().UTC(), Sandbox: r.Sandbox,
	}
	spec.Unit = m.opts.Runner.Unit(spec.ID)
	if spec.Mode == mcpwire.JobModeProcess {
		// Another process sharing the directory tells by it whether the
		// job still runs.
		spec.Process = selfProcess()
	}
	j := &job{spec: spec, dir: filepath.Join(m.dir, spec.ID), starting: true}
	// Placed before it starts, so the caps count it while it starts.
	m.jobs[spec.ID] = j
	m.mu.Unlock()

	fail := func(err error) (mcpwire.JobStatus, bool, error) {
		m.mu.Lock()
		delete(m.jobs, spec.ID)
		m.mu.Unlock()
		_ = os.RemoveAll(j.dir)
		m.refused.Add(1)
		return mcpwire.JobStatus{}, false, err
	}
	if err := writeSpec(j.dir, spec, r.Env); err != nil {
		if te := toolerr.NoSpace(err, "jobs: write the job's state", startRoom(r.Env)); te != nil {
			return fail(te)
		}
		return fail(toolerr.New(mcpwire.CodeUnavailable, "jobs: write the job's state: %v", err))
	}
	unlock()
	locked = false
	if err := m.opts.Runner.Check(ctx); err != nil {
		return fail(err)
	}
	if err := m.opts.Runner.Start(ctx, j.dir, spec); err != nil {
		return fail(err)
	}
	_ = os.Remove(filepath.Join(j.dir, startingFile))
	m.started.Add(1)
	m.log.Info("jobs: started", "job", spec.ID, "mode", spec.Mode, "unit", spec.Unit, "timeoutMs", spec.TimeoutMs)
	m.mu.Lock()
	defer m.mu.Unlock()
	j.starting = false
	return m.status(j), false, nil
}

// makeRoomLocked drops the oldest finished jobs until the kept count and
// the output budget leave room for one more job: every running job may
// still grow to its cap.
func (m *Manager) makeRoomLocked() error {
	var finished []*job
	var used int64
	for _, j := range m.jobs {
		if j.running() {
			used += m.lim.OutputBytes
			continue
		}
		used += outputSize(j.dir)
		finished = append(finished, j)
	}
	sort.Slice(finished, func(a, b int) bool { return finished[a].exit.Ended.Before(finished[b].exit.Ended) })
	for len(finished) > 0 && (used+m.lim.OutputBytes > m.lim.TotalOutputBytes || len(finished) >= m.lim.MaxKept) {
		j := finished[0]
		finished = finished[1:]
		used -= outputSize(j.dir)
		m.dropLocked(j)
	}
	if used+m.lim.OutputBytes > m.lim.TotalOutputBytes {
		return toolerr.New(mcpwire.CodeOverloaded, "jobs: the running jobs may fill the output budget (jobs.totalOutputBytes = %d); wait for one to end", m.lim.TotalOutputBytes)
	}
	return nil
}

func outputSize(dir string) int64 {
	return fileSize(filepath.Join(dir, stdoutFile)) + fileSize(filepath.Join(dir, stderrFile))
}

func (m *Manager) dropLocked(j *job) {
	delete(m.jobs, j.spec.ID)
	if err := os.RemoveAll(j.dir); err != nil {
		m.log.Warn("jobs: remove finished job", "job", j.spec.ID, "err", err)
	}
}

// prune drops finished jobs older than KeepFor.
func (m *Manager) prune() {
	cut := m.opts.Now().Add(-m.lim.KeepFor)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		if !j.running() && j.exit.Ended.Before(cut) {
			m.dropLocked(j)
		}
	}
}

// lookup finds job id for c: the owner's jobs, every job for the operator;
// anything else is NOT_FOUND, as if there were no such job.
func (m *Manager) lookupLocked(c caller.Caller, id string) (*job, error) {
	j, ok := m.jobs[id]
	if !ok {
		// Started by another process (the other slot) since the last scan.
		j = m.loadLocked(id)
		ok = j != nil
	}
	if !validID(id) || !ok || (c.Principal.Kind != caller.Operator && j.spec.Owner != c.Principal.Key()) {
		return nil, toolerr.New(mcpwire.CodeNotFound, "argument \"id\": no job %q of yours (job.list shows your jobs)", truncID(id))
	}
	return j, nil
}

func truncID(id string) string {
	if len(id) > 40 {
		return id[:40] + "..."
	}
	return id
}

// Status is job id's status.
func (m *Manager) Status(c caller.Caller, id string) (mcpwire.JobStatus, error) {
	m.mu.Lock()
	j, err := m.lookupLocked(c, id)
	m.mu.Unlock()
	if err != nil {
		return mcpwire.JobStatus{}, err
	}
	m.refresh(j)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status(j), nil
}

func (m *Manager) status(j *job) mcpwire.JobStatus {
	s := mcpwire.JobStatus{
		ID: j.spec.ID, State: mcpwire.JobRunning, Command: j.spec.Command,
		StartedAt:   j.spec.Created.UTC().Format(time.RFC3339Nano),
		StdoutBytes: fileSize(filepath.Join(j.dir, stdoutFile)),
		StderrBytes: fileSize(filepath.Join(j.dir, stderrFile)),
		OutputLimit: j.spec.OutputBytes, TimeoutMs: j.spec.TimeoutMs,
		Mode: j.spec.Mode, Unit: j.spec.Unit, Conversation: j.spec.Conversation,
	}
	if e := j.exit; e != nil {
		s.State, s.Done = e.State, true
		s.ExitCode, s.Signal, s.Message = e.ExitCode, e.Signal, e.Message
		end := e.Ended.UTC().Format(time.RFC3339Nano)
		s.EndedAt = &end
		s.DurationMs = e.Ended.Sub(j.spec.Created).Milliseconds()
	} else {
		s.DurationMs = m.opts.Now().Sub(j.spec.Created).Milliseconds()
	}
	return s
}

// List is c's jobs (every job for the operator), newest first.
func (m *Manager) List(c caller.Caller) []mcpwire.JobStatus {
	m.mu.Lock()
	m.scanLocked()
	var js []*job
	for _, j := range m.jobs {
		if c.Principal.Kind == caller.Operator || j.spec.Owner == c.Principal.Key() {
			js = append(js, j)
		}
	}
	m.mu.Unlock()
	for _, j := range js {
		if j.running() {
			m.refresh(j)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]mcpwire.JobStatus, 0, len(js))
	for _, j := range js {
		out = append(out, m.status(j))
	}
	slices.SortFunc(out, func(a, b mcpwire.JobStatus) int {
		switch {
		case a.StartedAt > b.StartedAt:
			return -1
		case a.StartedAt < b.StartedAt:
			return 1
		}
		return 0
	})
	return out
}

// Running lists every running job (mcpctl status, the cutover report).
func (m *Manager) Running() []mcpwire.JobStatus {
	var out []mcpwire.JobStatus
	for _, s := range m.List(caller.Caller{Principal: caller.Principal{Kind: caller.Operator}}) {
		if !s.Done {
			out = append(out, s)
		}
	}
	return out
}

// Wait ends when job id has ended, at deadline, when ctx ends, or when
// the backend starts shutting down; why says which (done, timeout,
// shutdown).
func (m *Manager) Wait(ctx context.Context, c caller.Caller, id string, deadline time.Time) (st mcpwire.JobStatus, why string, err error) {
	m.mu.Lock()
	f := flowOf(c)
	j, err := m.lookupLocked(c, id)
	if err == nil {
		if why := m.waiting.admit(m.waiters, f, m.opts.Now()); why != "" {
			err = toolerr.New(mcpwire.CodeOverloaded, "jobs: %s; poll with job.status or retry", why)
		}
	}
	if err != nil {
		m.mu.Unlock()
		return st, "", err
	}
	m.waiters[f]++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if m.waiters[f]--; m.waiters[f] <= 0 {
			delete(m.waiters, f)
		}
		m.mu.Unlock()
	}()
	return m.await(ctx, j, deadline)
}

// await is Wait's loop, for a job already looked up.
func (m *Manager) await(ctx context.Context, j *job, deadline time.Time) (st mcpwire.JobStatus, why string, err error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		m.refresh(j)
		m.mu.Lock()
		changed := m.changed
		st = m.status(j)
		m.mu.Unlock()
		if st.Done {
			return st, "done", nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return st, "timeout", nil
		case <-m.draining:
			return st, "shutdown", nil
		case <-ctx.Done():
			return st, "", ctx.Err()
		}
	}
}

// Cancel stops job id's whole process tree and returns its status once it
// has ended (or still running when the stop takes longer than ctx allows).
func (m *Manager) Cancel(ctx context.Context, c caller.Caller, id string) (mcpwire.JobStatus, error) {
	m.mu.Lock()
	j, err := m.lookupLocked(c, id)
	m.mu.Unlock()
	if err != nil {
		return mcpwire.JobStatus{}, err
	}
	if m.refresh(j) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.status(j), nil
	}
	if err := os.WriteFile(filepath.Join(j.dir, cancelFile), nil, 0o600); err != nil {
		return mcpwire.JobStatus{}, toolerr.New(mcpwire.CodeUnavailable, "jobs: mark the job cancelled: %v", err)
	}
	if err := m.opts.Runner.Stop(ctx, j.spec); err != nil {
		return mcpwire.JobStatus{}, err
	}
	st, _, err := m.await(ctx, j, time.Now().Add(killGrace+3*time.Second))
	if errors.Is(err, context.Canceled) {
		return m.Status(c, id)
	}
	return st, err
}

// Metrics is the jobs part of /metrics.
func (m *Manager) Metrics() mcpwire.JobMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := mcpwire.JobMetrics{Mode: m.Mode(), Started: m.started.Load(), Refused: m.refused.Load()}
	for _, j := range m.jobs {
		if j.running() {
			out.Running++
		} else {
			out.Kept++
		}
		out.OutputBytes += outputSize(j.dir)
	}
	return out
}

// Dir is the job's directory (tests, the supervisor's unit).
func (m *Manager) Dir(id string) string { return filepath.Join(m.dir, id) }

// Waiters is how many job.wait calls wait now.
func (m *Manager) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, w := range m.waiters {
		n += w
	}
	return n
}
