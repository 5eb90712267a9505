package jobs

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/backend/procgroup"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units/hostlayout"
)

// ProcessRunner runs each job's supervisor as a goroutine of the backend:
// the job is a process group of the backend and ends with it. How a job
// ended is what its supervisor reaped, kept in memory: nothing on disk
// decides it while this process runs.
type ProcessRunner struct {
	mu        sync.Mutex
	cancels   map[string]context.CancelFunc
	cancelled map[string]bool // job.cancel asked (else a stop is the backend's exit)
	results   map[string]Exit // ended, not yet handed to the manager
	wg        sync.WaitGroup
	closed    bool
}

// NewProcessRunner returns a runner for process mode.
func NewProcessRunner() *ProcessRunner {
	return &ProcessRunner{cancels: map[string]context.CancelFunc{}, cancelled: map[string]bool{}, results: map[string]Exit{}}
}

// Mode is process.
func (*ProcessRunner) Mode() string { return mcpwire.JobModeProcess }

// Unit is "": a process-mode job has no unit.
func (*ProcessRunner) Unit(string) string { return "" }

// Check always passes.
func (*ProcessRunner) Check(context.Context) error { return nil }

// Start runs the supervisor in a goroutine.
func (r *ProcessRunner) Start(_ context.Context, jobDir string, spec Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return toolerr.New(mcpwire.CodeUnavailable, "backend is shutting down: no new jobs")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancels[spec.ID] = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		stopped := func() string {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.cancelled[spec.ID] {
				return mcpwire.JobCancelled
			}
			return mcpwire.JobLost
		}
		ex, _ := Supervise(ctx, jobDir, stopped, Hide{})
		// On disk for a later process; this one keeps what it reaped.
		_ = WriteExit(jobDir, ex)
		r.mu.Lock()
		r.results[spec.ID] = ex
		delete(r.cancels, spec.ID)
		delete(r.cancelled, spec.ID)
		r.mu.Unlock()
		cancel()
	}()
	return nil
}

// Stop ends the job's supervisor, which kills the group.
func (r *ProcessRunner) Stop(_ context.Context, spec Spec) error {
	r.mu.Lock()
	cancel := r.cancels[spec.ID]
	if cancel != nil {
		r.cancelled[spec.ID] = true
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return nil
}

// Ended: a job of this process has ended once its supervisor returned,
// with what it reaped; one of an earlier process died with it, and its
// record is the one that process wrote, if any. One of another process
// that still runs (the other slot, sharing the directory) runs until that
// process wrote its record; a job.cancel asked there (its cancel file) is
// carried out here, where the job's supervisor is.
func (r *ProcessRunner) Ended(ctx context.Context, jobDir string, spec Spec, _ bool) (Exit, bool, bool, error) {
	r.mu.Lock()
	ex, done := r.results[spec.ID]
	_, running := r.cancels[spec.ID]
	if done {
		delete(r.results, spec.ID)
	}
	r.mu.Unlock()
	switch {
	case done:
		return ex, true, true, nil
	case running:
		if _, err := os.Stat(filepath.Join(jobDir, cancelFile)); err == nil {
			_ = r.Stop(ctx, spec)
		}
		return Exit{}, false, false, nil
	}
	ex, ok, err := readExit(jobDir)
	if spec.Process != "" && spec.Process != selfProcess() && processAlive(spec.Process) {
		// That process writes the record once its supervisor returned.
		return ex, ok && err == nil, ok && err == nil, nil
	}
	return ex, ok && err == nil, true, nil
}

// Close kills every job and waits for their records, bounded.
func (r *ProcessRunner) Close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.cancels {
		c()
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(killGrace + procgroup.PipeWaitDelay + time.Second):
	}
}

// Slice is the systemd slice every job unit runs in; `mcpctl unit
// install` installs it with the slice-wide limits.
const Slice = hostlayout.JobsSlice

// SystemdClient is what the systemd runner needs of the D-Bus client.
type SystemdClient interface {
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
	StartTransientService(ctx context.Context, t systemd.TransientService) error
	Stop(ctx context.Context, unit string) error
}

// SystemdRunner runs each job as a transient service in Slice whose main
// process is `EXE job-exec --dir JOBDIR`. It keeps one connection to
// systemd and opens a new one after a transport failure or a deadline.
type SystemdRunner struct {
	// Connect opens a client; ctx bounds the connect.
	Connect func(ctx context.Context) (SystemdClient, func(), error)
	// Exe is the backend binary the units run (its real path, so that a
	// release swap does not change what a running job runs).
	Exe string
	// Timeout bounds each D-Bus step.
	Timeout time.Duration

	mu     sync.Mutex
	conn   SystemdClient
	closer func()
}

// Mode is systemd.
func (*SystemdRunner) Mode() string { return mcpwire.JobModeSystemd }

// Unit is the job's unit, named before it starts: the spec written before
// the unit exists tells any later backend which unit to ask about.
func (*SystemdRunner) Unit(id string) string { return UnitName(id) }

// UnitName is the unit of job id.
func UnitName(id string) string { return hostlayout.JobUnitPrefix + id + ".service" }

// client returns the shared connection (opened on first use) and a
// context bounded by Timeout; done reports the call's error so that a
// broken connection is dropped (a D-Bus error reply leaves it in use).
func (r *SystemdRunner) client(ctx context.Context) (SystemdClient, func(error), context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	r.mu.Lock()
	c := r.conn
	r.mu.Unlock()
	if c == nil {
		nc, closeFn, err := r.Connect(ctx)
		if err != nil {
			cancel()
			return nil, nil, nil, nil, toolerr.New(mcpwire.CodeUnavailable, "jobs: systemd is not reachable over D-Bus: %v", err)
		}
		r.mu.Lock()
		if r.conn == nil {
			r.conn, r.closer = nc, closeFn
		} else {
			closeFn()
		}
		c = r.conn
		r.mu.Unlock()
	}
	done := func(err error) {
		if err == nil || systemd.ErrorName(err) != "" {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.conn == c {
			r.closer()
			r.conn, r.closer = nil, nil
		}
	}
	return c, done, ctx, cancel, nil
}

// Check refuses jobs while the slice is not installed.
func (r *SystemdRunner) Check(ctx context.Context) error {
	c, done, ctx, cancel, err := r.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	st, err := c.Unit(ctx, Slice)
	done(err)
	if err != nil {
		return toolerr.New(mcpwire.CodeUnavailable, "jobs: read %s: %v", Slice, err)
	}
	// systemd makes up a slice that has no unit file (loaded, no
	// fragment): without ours, there would be no slice-wide limits.
	if st.LoadState != "loaded" || st.FragmentPath == "" {
		return toolerr.New(mcpwire.CodeUnavailable, "jobs: the slice %s is not installed (LoadState=%s, no unit file): run `mcpctl unit install` to install it; no job was started", Slice, st.LoadState)
	}
	return nil
}

// Start starts the job's unit and waits until its supervisor runs.
func (r *SystemdRunner) Start(ctx context.Context, jobDir string, spec Spec) error {
	c, done, ctx, cancel, err := r.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	// The supervisor enforces timeoutMs itself and records it; systemd's
	// runtime limit is the backstop should the supervisor hang.
	runtime := time.Duration(spec.TimeoutMs)*time.Millisecond + killGrace + 30*time.Second
	err = c.StartTransientService(ctx, systemd.TransientService{
		Name:        spec.Unit,
		Description: "mcp-backend job " + spec.ID,
		Slice:       Slice,
		Argv:        []string{r.Exe, "job-exec", "--dir", jobDir},
		MemoryMax:   uint64(spec.MemoryMax),
		TasksMax:    uint64(spec.TasksMax),
		RuntimeMax:  runtime,
		StopTimeout: killGrace + 3*time.Second,
		// A stop gives the supervisor SIGTERM, then SIGKILLs the rest of
		// the cgroup: the supervisor ends the job's group itself.
		KillMode:   "mixed",
		Properties: unitSandbox(spec.Sandbox, jobDir),
	})
	done(err)
	if err != nil {
		return toolerr.New(mcpwire.CodeUnavailable, "jobs: start unit %s: %v", spec.Unit, err)
	}
	return nil
}

// Stop stops the unit: SIGTERM to the supervisor, which ends the group and
// records the end, then SIGKILL to whatever is left in the cgroup.
func (r *SystemdRunner) Stop(ctx context.Context, spec Spec) error {
	c, done, ctx, cancel, err := r.client(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	err = c.Stop(ctx, spec.Unit)
	done(err)
	if err != nil {
		return toolerr.New(mcpwire.CodeUnavailable, "jobs: stop %s: %v", spec.Unit, err)
	}
	return nil
}

// Ended says whether the job's unit is gone and, when it is, reads the
// record its supervisor wrote before it exited. While the unit is active
// the job runs, whatever its directory holds; once systemd has it inactive
// its cgroup is empty, so nothing of the job can write any more. Without
// poll, a directory without a record costs no D-Bus call.
func (r *SystemdRunner) Ended(ctx context.Context, jobDir string, spec Spec, poll bool) (Exit, bool, bool, error) {
	if !poll {
		if _, err := os.Lstat(filepath.Join(jobDir, exitFile)); err != nil {
			return Exit{}, false, false, nil
		}
	}
	gone, err := r.gone(ctx, spec)
	if err != nil || !gone {
		return Exit{}, false, false, err
	}
	ex, ok, err := readExit(jobDir)
	return ex, ok && err == nil, true, nil
}

// gone says whether systemd has no running unit for the job any more.
func (r *SystemdRunner) gone(ctx context.Context, spec Spec) (bool, error) {
	if spec.Unit == "" || filepath.Base(spec.Unit) != spec.Unit {
		return true, nil
	}
	c, done, ctx, cancel, err := r.client(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	st, err := c.Unit(ctx, spec.Unit)
	done(err)
	if err != nil {
		return false, err
	}
	return !unitstate.Running(st.ActiveState), nil
}

// Close closes the connection and leaves every job running: they are not
// the backend's.
func (r *SystemdRunner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		r.closer()
		r.conn, r.closer = nil, nil
	}
}
