package jobs

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/procgroup"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// killGrace is how long a job's group has between SIGTERM and SIGKILL:
// shell.exec's.
const killGrace = procgroup.KillGrace

// Supervise runs the job in jobDir to its end and returns how it ended,
// from the status it reaped: the shell in its own process group
// (procgroup: the group and the descendants that left it end with it),
// stdin /dev/null, stdout and stderr written to their files under one
// shared cap, the job's timeout. When ctx ends (SIGTERM from systemd on a
// stop, job.cancel or the backend's exit in process mode) the group gets
// SIGTERM, then SIGKILL after killGrace; stopped then names the state to
// record (cancelled, killed, lost). It is the main of `mcp-backend
// job-exec` under systemd, which writes the record (WriteExit), and runs
// in the backend itself without, which keeps it.
func Supervise(ctx context.Context, jobDir string, stopped func() string, hide Hide) (Exit, error) {
	spec, env, err := ReadSpec(jobDir)
	if err != nil {
		return Exit{}, fmt.Errorf("job-exec: %w", err)
	}
	started := time.Now().UTC()
	rec := func(e Exit) (Exit, error) {
		e.Version, e.Started, e.Ended = FormatVersion, started, time.Now().UTC()
		return e, nil
	}
	out := &capped{limit: spec.OutputBytes, over: make(chan struct{})}
	for i, name := range []string{stdoutFile, stderrFile} {
		f, err := os.OpenFile(filepath.Join(jobDir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return rec(Exit{State: mcpwire.JobLost, Message: "open output: " + err.Error()})
		}
		defer f.Close()
		out.files[i] = f
	}
	cmd := exec.Command(spec.Shell, "-c", spec.Command)
	cmd.Env = ownUnitEnv(env)
	if spec.Sandbox != nil {
		// The profile's helper covers the state directory with the
		// other masks; the environment is the clean one the job was
		// started with.
		if cmd, err = sandboxed(spec, jobDir, hide); err != nil {
			return rec(Exit{State: mcpwire.JobExited, ExitCode: new(125), Message: "sandbox: " + err.Error()})
		}
		cmd.Env = env
	} else if hide.Self != "" {
		// The shell starts in a mount namespace of its own, where
		// HideAndExec covers the state directory before it runs.
		cmd = exec.Command(hide.Self, "job-shell", "--hide", hide.Dir, "--", spec.Shell, "-c", spec.Command)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	cmd.Dir = spec.Cwd
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = stream{out, 0}
	cmd.Stderr = stream{out, 1}
	g, err := procgroup.Start(cmd)
	if err != nil {
		return rec(Exit{State: mcpwire.JobExited, ExitCode: new(127), Message: "start shell: " + err.Error()})
	}
	timer := time.NewTimer(time.Duration(spec.TimeoutMs) * time.Millisecond)
	defer timer.Stop()
	state := ""
	select {
	case <-g.Exited():
	case <-timer.C:
		state = mcpwire.JobTimeout
	case <-out.over:
		state = mcpwire.JobOutputLimit
	case <-ctx.Done():
		state = stopped()
	}
	if state != "" {
		g.Terminate()
	}
	_, _ = g.Finish()
	e := Exit{State: state, OutputLimited: out.limited()}
	if state == mcpwire.JobLost || state == mcpwire.JobKilled {
		e.Message = "stopped before it ended: its supervisor was told to stop (a stop of its unit, its runtime limit, the host shutting down, or the backend's exit in process mode)"
	}
	if d := out.droppedBytes(); d > 0 && e.Message == "" {
		e.Message = fmt.Sprintf("%d bytes of output not stored: the state directory's filesystem refused them (full?)", d)
	}
	if e.OutputLimited && state == "" {
		state = mcpwire.JobOutputLimit
		e.State = state
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = fmt.Sprintf("SIG%d", int(ws.Signal()))
		}
		e.Signal = &name
		if state == "" {
			e.State = mcpwire.JobKilled
		}
	default:
		code := ws.ExitStatus()
		e.ExitCode = &code
		if state == "" {
			e.State = mcpwire.JobExited
		}
	}
	return rec(e)
}

// capped writes stdout and stderr to their files under one shared limit;
// bytes past it are dropped (the pipes keep draining) and over is closed.
type capped struct {
	mu     sync.Mutex
	limit  int64
	total  int64
	files  [2]io.Writer
	over   chan struct{}
	isOver bool
	// dropped counts the bytes a write to the files failed for.
	dropped int64
}

func (c *capped) droppedBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

func (c *capped) limited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isOver
}

type stream struct {
	c *capped
	i int
}

func (s stream) Write(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(len(p))
	if room := c.limit - c.total; n > room {
		n = max(room, 0)
		if !c.isOver {
			c.isOver = true
			close(c.over)
		}
	}
	if n > 0 {
		// Output the filesystem has no room for is dropped, never
		// refused: a refused write would end the copy and the job would
		// die of a closed pipe, not end as it would have.
		if _, err := c.files[s.i].Write(p[:n]); err != nil {
			c.dropped += n
			return len(p), nil
		}
		c.total += n
	}
	return len(p), nil
}

// unitVars describe the unit a process runs in: a job's shell gets its own
// unit's (the supervisor's), not the backend's that the environment was
// copied from.
var unitVars = []string{"INVOCATION_ID", "JOURNAL_STREAM", "STATE_DIRECTORY", "CREDENTIALS_DIRECTORY"}

func ownUnitEnv(env []string) []string {
	out := make([]string, 0, len(env)+len(unitVars))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(unitVars, k) {
			out = append(out, kv)
		}
	}
	for _, k := range unitVars {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// sandboxed is the job's shell through the sandbox helper (hide.Self,
// else this executable), with the jobs' state directory among the masks.
func sandboxed(spec Spec, jobDir string, hide Hide) (*exec.Cmd, error) {
	self := hide.Self
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		self = exe
	}
	s := *spec.Sandbox
	state := hide.Dir
	if state == "" {
		abs, err := filepath.Abs(jobDir)
		if err != nil {
			return nil, err
		}
		state = filepath.Dir(filepath.Dir(abs)) // <stateDir>/v1/<id>
	}
	s.Mask = append(slices.Clone(s.Mask), state)
	s.Dir = spec.Cwd
	return sandbox.Command(self, &s, []string{spec.Shell, "-c", spec.Command})
}

// Hide runs a job's shell through `Self job-shell --hide Dir`, in a mount
// namespace of its own where Dir (the jobs' state directory) is an empty
// read-only directory. The zero Hide runs the shell directly.
type Hide struct{ Self, Dir string }

// HideAndExec is `mcp-backend job-shell`: in the mount namespace its
// supervisor unshared for it, cover dir with an empty read-only tmpfs and
// exec argv. The namespace's mounts are made private first, so the cover
// never reaches the host's namespace.
func HideAndExec(dir string, argv []string) error {
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) || !filepath.IsAbs(dir) {
		return fmt.Errorf("job-shell: want an absolute --hide DIR and an absolute program after --")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("job-shell: make mounts private: %w", err)
	}
	if err := unix.Mount("mcp-job-hidden", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=000"); err != nil {
		return fmt.Errorf("job-shell: cover %s: %w", dir, err)
	}
	return unix.Exec(argv[0], argv, os.Environ())
}

// Exec is `mcp-backend job-exec`: Supervise the job in jobDir (its shell
// through self's job-shell, with the state directory hidden), then write
// its record, replacing anything the job put in its place. A stop
// (SIGTERM from systemd: job.cancel, the runtime limit, the host shutting
// down) is cancelled when job.cancel asked, killed otherwise.
func Exec(ctx context.Context, jobDir, self string) (Exit, error) {
	stopped := func() string {
		if _, err := os.Stat(filepath.Join(jobDir, cancelFile)); err == nil {
			return mcpwire.JobCancelled
		}
		return mcpwire.JobKilled
	}
	abs, err := filepath.Abs(jobDir)
	if err != nil {
		return Exit{}, fmt.Errorf("job-exec: %w", err)
	}
	// <stateDir>/v1/<id>: hide the whole state directory.
	e, err := Supervise(ctx, jobDir, stopped, Hide{Self: self, Dir: filepath.Dir(filepath.Dir(abs))})
	if err != nil {
		return e, err
	}
	return e, keepExit(ctx, jobDir, e, time.Second, 30*time.Second)
}

// keepExit writes the record, and while it cannot be written (a full
// filesystem even after the reserve was given back) keeps it here,
// trying again after a delay that doubles from first up to limit: the
// supervisor stays, so the backend sees the job running, not lost, and
// reads its real end once the record is written. A stop of the unit
// (ctx) ends the wait: what systemd stops is gone whatever it holds.
func keepExit(ctx context.Context, jobDir string, e Exit, first, limit time.Duration) error {
	for delay := first; ; delay = min(2*delay, limit) {
		err := WriteExit(jobDir, e)
		if err == nil {
			return nil
		}
		fmt.Fprintf(os.Stderr, "job-exec: record not written, trying again in %s: %v\n", delay, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}
