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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/mcpwire"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/toolerr"
)

const (
	sigTERM = syscall.SIGTERM
	sigKILL = syscall.SIGKILL
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
		o.ShellPath, o.DefaultTimeout.Milliseconds(), o.MaxTimeout.Milliseconds(), o.OutputBytes, killGrace)
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
	cmd := exec.Command(t.opts.ShellPath, "-c", in.Command)
	cmd.Dir = in.Cwd
	// A marker every descendant inherits: processes that leave the group
	// (setsid, job control) are still found by it and killed with it.
	marker := execMarker()
	cmd.Env = append(env, marker)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = out.stream(&out.stdout)
	cmd.Stderr = out.stream(&out.stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// An orphan that escaped the group (setsid) may keep a pipe open: after
	// the shell has exited, Wait closes the pipes after this delay.
	cmd.WaitDelay = pipeWaitDelay

	if err := t.beginExec(); err != nil {
		return res, err
	}
	defer t.running.Done()

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, startError(t.opts.ShellPath, err)
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group id is the leader's pid
	// Every descendant starts at or after the leader: the marker kill only
	// waits for processes that young (0 if unreadable: then for any).
	leader, _ := readStat(pgid)
	since := leader.startTicks
	if !t.track(pgid) {
		killGroup(pgid, sigKILL) // Close ran between beginExec and Start
	}

	// exited is closed once the leader has exited, without reaping it: while
	// the leader is an unreaped zombie its pid, and so the group id, cannot
	// be reused, which makes the final group SIGKILL safe.
	exited := make(chan struct{})
	go func() {
		waitExitedNoReap(pgid)
		close(exited)
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	reason := endExited
	select {
	case <-exited:
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
		killGroup(pgid, sigTERM)
		grace := time.NewTimer(killGrace)
		select {
		case <-exited:
		case <-grace.C:
		}
		grace.Stop()
	}
	// Always sweep the group: descendants may linger after the leader exits.
	killGroup(pgid, sigKILL)
	if left := killMarked(marker, since); left > 0 {
		t.log.Warn("tools: marked descendants still running after the group kill", "processes", left, "rounds", killMarkedRounds)
	}
	<-exited
	t.untrack(pgid)
	waitErr := cmd.Wait() // reaps the leader; pipes drained or closed after WaitDelay
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

// killGroup signals every process of the group; ESRCH (group gone) is fine.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return // never signal -1 (everything) or our own group by accident
	}
	_ = syscall.Kill(-pgid, sig)
}

// waitExitedNoReap blocks until process pid has exited, leaving it a zombie
// for cmd.Wait to reap.
func waitExitedNoReap(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		return // exited, or ECHILD: nothing left to wait for
	}
}

var systemdOnly = map[string]bool{
	"NOTIFY_SOCKET": true, "WATCHDOG_USEC": true, "WATCHDOG_PID": true,
	"LISTEN_FDS": true, "LISTEN_PID": true, "LISTEN_FDNAMES": true,
}

// execMarkerVar names the environment variable that marks a command's
// descendants. A client-supplied value for it is overwritten.
const execMarkerVar = "MCP_BACKEND_EXEC"

var execSeq atomic.Uint64

// execMarker returns a NAME=VALUE unique to one command in this process.
func execMarker() string {
	return fmt.Sprintf("%s=%d.%d", execMarkerVar, selfPID, execSeq.Add(1))
}

// killMarkedRounds bounds how often killMarked rescans /proc. A marked
// process can fork between the listing of /proc and its own kill; every
// round kills what the last one missed, and a process that is SIGKILLed
// forks no more, so the rounds run out only under a pid flood.
const killMarkedRounds = 200

// execWindowWait bounds how long killMarked waits for processes that show
// no environment (see killMarked). Leaving execve takes microseconds; only
// a process started without any environment (env -i) that left the group
// makes the wait run out, and then it cannot be told apart anyway.
const execWindowWait = 2 * time.Second

// killMarked SIGKILLs every process whose environment carries marker: the
// command's descendants that escaped its process group. One pass is not
// enough: a marked process may fork after /proc was listed, so the scan
// repeats until two passes in a row find no marked process. A process in
// the middle of execve shows an empty environment until the new program's
// stack is set up, and on a loaded machine it can be preempted there for
// longer than two passes: while a pass finds such a process (a user
// process started no earlier than the command, since, with no
// environment), it does not count as clean. It reads /proc/PID/environ of
// every process, a few milliseconds per pass. It returns how many marked
// processes the last pass still found (0 when all are gone).
func killMarked(marker string, since int64) int {
	needle := []byte(marker + "\x00")
	deadline := time.Now().Add(execWindowWait)
	left, clean := 0, 0
	for rounds := 0; rounds < killMarkedRounds; {
		found, unsure := killMarkedOnce(needle, since)
		left = found
		if found == 0 && unsure > 0 && time.Now().Before(deadline) {
			// Only processes in mid-execve may remain: give them the CPU
			// this loop would take from them, then look again.
			clean = 0
			time.Sleep(time.Millisecond)
			continue
		}
		rounds++
		if found > 0 {
			clean = 0
			continue
		}
		if clean++; clean == 2 {
			return 0
		}
	}
	return left
}

// killMarkedOnce kills the marked processes of one /proc listing and
// returns how many it found, and how many could not be told apart (no
// environment yet, see killMarked). A process already dying (SIGKILLed,
// memory not yet released) is found again: the next round sees it gone.
func killMarkedOnce(needle []byte, since int64) (found, unsure int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == selfPID {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone
		}
		if len(env) == 0 {
			if inExecWindow(pid, since) {
				unsure++
			}
			continue
		}
		if !bytes.Contains(env, needle) {
			continue
		}
		found++
		// Through a pidfd, and the marker read again once it is held: a
		// pid that exited and was reused between the read and the kill is
		// never signalled.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if hasMarker(pid, needle) {
			_ = unix.PidfdSendSignal(fd, sigKILL, nil, 0)
		}
		unix.Close(fd)
	}
	return found, unsure
}

// pfKthread is PF_KTHREAD of /proc/PID/stat's flags: a kernel thread.
const pfKthread = 0x00200000

// inExecWindow says whether a process that shows no environment may be a
// process in the middle of execve, started at or after since: a live user
// process, not a kernel thread or a zombie (they show none either).
func inExecWindow(pid int, since int64) bool {
	st, ok := readStat(pid)
	return ok && st.flags&pfKthread == 0 && st.State != "Z" && st.State != "X" && st.startTicks >= since
}

func hasMarker(pid int, needle []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && bytes.Contains(b, needle)
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
