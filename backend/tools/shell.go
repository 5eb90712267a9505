package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/backend/procgroup"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/mcpwire"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/toolerr"
)

// ShellExecInput is the input of shell.exec.
type ShellExecInput struct {
	Command   string            `json:"command" jsonschema:"shell command, run as SHELL -c COMMAND in its own process group"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"absolute working directory (default: the backend's)"`
	TimeoutMs *int64            `json:"timeoutMs,omitempty" jsonschema:"timeout in milliseconds, > 0; capped at the configured maximum"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"variables added to the backend's environment"`
}

func (*ShellExecInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["command"].MinLength = new(1)
	s.Properties["timeoutMs"].Minimum = new(1.0)
}

func shellExecDescription(o Options) string {
	return fmt.Sprintf("Run a shell command (%s -c COMMAND) in its own process group. "+
		"timeoutMs defaults to %d and is capped at %d; stdout+stderr together are limited to %d bytes. "+
		"Timeout, output limit and cancellation kill the whole group (SIGTERM, SIGKILL after %s); "+
		"background processes still running when the shell exits are killed too, including ones that left the group (setsid, set -m) "+
		"as long as they keep the environment, so this cannot start daemons (use service.control). "+
		"Output that is not valid UTF-8 has the invalid bytes replaced by U+FFFD.",
		o.ShellPath, o.DefaultTimeout.Milliseconds(), o.MaxTimeout.Milliseconds(), o.OutputBytes, procgroup.KillGrace)
}

// endReason says why the supervisor stopped waiting for the shell.
type endReason int

const (
	endExited endReason = iota
	endTimeout
	endOutputLimit
	endCancelled
	endClosed
)

func (t *Tools) shellExec(ctx context.Context, in ShellExecInput) (mcpwire.ShellResult, error) {
	var res mcpwire.ShellResult
	if strings.TrimSpace(in.Command) == "" {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"command\": must not be empty")
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"command\": must not contain NUL bytes")
	}
	// Capped rather than refused: timeoutMs is capped by shell.maxTimeoutMs.
	timeout, err := execTimeout(in.TimeoutMs, t.opts.DefaultTimeout, t.opts.MaxTimeout)
	if err != nil {
		return res, err
	}
	env, err := shellEnv(in.Env)
	if err != nil {
		return res, err
	}
	if in.Cwd != "" {
		if err := checkDir("cwd", in.Cwd); err != nil {
			return res, err
		}
	}

	out := newCapture(t.opts.OutputBytes, t.encodedBudget())
	cmd, env, err := t.sandboxed(ctx, exec.Command(t.opts.ShellPath, "-c", in.Command), env, in.Env, in.Cwd)
	if err != nil {
		return res, err
	}
	cmd.Dir = in.Cwd
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = out.stream(&out.stdout)
	cmd.Stderr = out.stream(&out.stderr)

	if err := t.beginExec(); err != nil {
		return res, err
	}
	defer t.running.Done()

	start := time.Now()
	g, err := procgroup.Start(cmd)
	if err != nil {
		return res, startError(t.opts.ShellPath, err)
	}
	pgid := g.Pgid()
	if !t.track(pgid) {
		procgroup.KillGroup(pgid, syscall.SIGKILL) // Close ran between beginExec and Start
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	reason := endExited
	select {
	case <-g.Exited():
	case <-timer.C:
		reason = endTimeout
	case <-out.limited:
		reason = endOutputLimit
	case <-ctx.Done():
		reason = endCancelled
	case <-t.closing:
		reason = endClosed
	}
	if reason != endExited && reason != endClosed {
		g.Terminate()
	}
	left, waitErr := g.Finish() // reaps the leader; pipes drained or closed after WaitDelay
	if left > 0 {
		t.log.Warn("tools: marked descendants still running after the group kill", "processes", left)
	}
	t.untrack(pgid)
	res.DurationMs = time.Since(start).Milliseconds()

	switch reason {
	case endCancelled:
		return res, fmt.Errorf("shell.exec: command killed: %w", ctx.Err())
	case endClosed:
		return res, toolerr.New(mcpwire.CodeUnavailable, "backend is shutting down: command killed")
	}
	if ps := cmd.ProcessState; ps != nil {
		ws, _ := ps.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled():
			name := unix.SignalName(ws.Signal())
			if name == "" {
				name = fmt.Sprintf("SIG%d", int(ws.Signal()))
			}
			res.Signal = &name
		default:
			code := ws.ExitStatus()
			res.ExitCode = &code
		}
	} else if waitErr != nil {
		return res, fmt.Errorf("shell.exec: wait: %w", waitErr)
	}
	res.TimedOut = reason == endTimeout
	res.Stdout, res.Stderr, res.OutputLimited = out.result()
	res.OutputLimited = res.OutputLimited || reason == endOutputLimit
	return res, nil
}

// sandboxed returns cmd run through the sandbox helper when the call
// carries a profile, with the clean environment plus the call's
// variables instead of the backend's; else cmd and env unchanged.
func (t *Tools) sandboxed(ctx context.Context, cmd *exec.Cmd, env []string, extra map[string]string, dir string) (*exec.Cmd, []string, error) {
	sb, ok := sandbox.From(ctx)
	if !ok || sb.Spec == nil {
		return cmd, env, nil
	}
	if t.opts.SandboxExe == "" {
		return nil, nil, toolerr.New(mcpwire.CodeInternal, "sandbox %s: no helper configured: the command was not run", sb.Name)
	}
	spec := *sb.Spec
	spec.Dir = dir
	c, err := sandbox.Command(t.opts.SandboxExe, &spec, cmd.Args)
	if err != nil {
		return nil, nil, toolerr.New(mcpwire.CodeInternal, "sandbox %s: %v", sb.Name, err)
	}
	return c, sandbox.Env(sb.Spec, extra), nil
}

// beginExec registers a running call unless Close has run.
func (t *Tools) beginExec() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return toolerr.New(mcpwire.CodeUnavailable, "backend is shutting down: no new commands")
	}
	t.running.Add(1)
	return nil
}

// track records a running group; false when Close already ran.
func (t *Tools) track(pgid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[pgid] = struct{}{}
	return !t.closed
}

func (t *Tools) untrack(pgid int) {
	t.mu.Lock()
	delete(t.groups, pgid)
	t.mu.Unlock()
}

var systemdOnly = map[string]bool{
	"NOTIFY_SOCKET": true, "WATCHDOG_USEC": true, "WATCHDOG_PID": true,
	"LISTEN_FDS": true, "LISTEN_PID": true, "LISTEN_FDNAMES": true,
}

// shellEnv is the backend's environment plus extra; later entries win.
func shellEnv(extra map[string]string) ([]string, error) {
	var env []string
	for _, kv := range os.Environ() {
		// systemd's notification and socket-passing variables are the
		// backend's own, not its commands'.
		if k, _, _ := strings.Cut(kv, "="); systemdOnly[k] {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"env\": invalid variable name %q (non-empty, no '=' or NUL)", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"env\": value of %q contains a NUL byte", k)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// checkDir requires an absolute, existing directory for argument field.
func checkDir(field, dir string) error {
	if !filepath.IsAbs(dir) {
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: must be an absolute path (got %q)", field, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fsError(field, err)
	}
	if !fi.IsDir() {
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: %s is not a directory", field, dir)
	}
	return nil
}

func startError(shell string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return toolerr.New(mcpwire.CodeUnavailable, "shell %s not found: %v", shell, err)
	}
	if errors.Is(err, fs.ErrPermission) {
		return toolerr.New(mcpwire.CodePermissionDenied, "cannot start shell %s: %v", shell, err)
	}
	return toolerr.New(mcpwire.CodeInternal, "start shell %s: %v", shell, err)
}

// capture collects stdout and stderr under one shared byte limit. Bytes over
// the limit are dropped (the pipes keep draining so nothing blocks) and
// limited is closed, which makes the supervisor kill the group.
type capture struct {
	mu             sync.Mutex
	limit          int64
	encBudget      int // encoded JSON bytes stdout and stderr may take together
	total          int64
	stdout, stderr bytes.Buffer
	over           bool
	limited        chan struct{}
}

func newCapture(limit int64, encBudget int) *capture {
	return &capture{limit: limit, encBudget: encBudget, limited: make(chan struct{})}
}

type captureStream struct {
	c   *capture
	buf *bytes.Buffer
}

func (c *capture) stream(buf *bytes.Buffer) captureStream { return captureStream{c, buf} }

func (s captureStream) Write(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - c.total
	n := int64(len(p))
	if n > room {
		n = max(room, 0)
		if !c.over {
			c.over = true
			close(c.limited)
		}
	}
	s.buf.Write(p[:n])
	c.total += n
	return len(p), nil
}

// result returns the captured output as valid UTF-8, still within the limit
// (a replacement rune is 3 bytes, so sanitizing can grow the text), and
// whether bytes were dropped.
func (c *capture) result() (stdout, stderr string, limited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stdout = strings.ToValidUTF8(c.stdout.String(), "\uFFFD")
	stderr = strings.ToValidUTF8(c.stderr.String(), "\uFFFD")
	limited = c.over
	if excess := int64(len(stdout)+len(stderr)) - c.limit; excess > 0 {
		limited = true
		cut := min(excess, int64(len(stdout)))
		stdout = cutUTF8(stdout, len(stdout)-int(cut))
		if rest := int64(len(stdout)+len(stderr)) - c.limit; rest > 0 {
			stderr = cutUTF8(stderr, len(stderr)-int(rest))
		}
	}
	if so, se := jsonsize.Max(stdout), jsonsize.Max(stderr); c.encBudget > 0 && so+se > c.encBudget {
		// stderr keeps up to half the budget, or what stdout leaves.
		limited = true
		if seMax := max(c.encBudget/2, c.encBudget-so); se > seMax {
			stderr = jsonsize.PrefixWithin(stderr, seMax)
			se = jsonsize.Max(stderr)
		}
		stdout = jsonsize.PrefixWithin(stdout, c.encBudget-se)
	}
	return stdout, stderr, limited
}
