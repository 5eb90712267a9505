// Package candidate checks a candidate mcp-backend build before anything is
// started from it: the file is a regular executable, `--version` answers,
// `check-config` accepts the config it would run with, and its sha256 digest
// (which verdicts and cutover records are keyed by).
package candidate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// DefaultTimeout bounds each run of the candidate when Options.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// Options configure Check.
type Options struct {
	// Config, when set, is passed to `check-config --config`; the candidate
	// must exit 0 on it.
	Config string
	// Timeout bounds each run of the candidate; DefaultTimeout when zero.
	Timeout time.Duration
}

// Result is what the checks learned about a candidate.
type Result struct {
	Path string `json:"path"`
	// Version is what `--version` names ("mcp-backend v1.2.3", or
	// "mcp-backend version v1.2.3").
	Version string `json:"version"`
	// VersionLine is the whole first line `--version` printed.
	VersionLine string `json:"versionLine"`
	Digest      string `json:"digest"`
	// ConfigChecked is the config check-config accepted ("" when none).
	ConfigChecked string `json:"configChecked,omitempty"`
}

// Error is a failed check; it names the build path and the check.
type Error struct {
	Path  string
	Check string // "file", "executable", "--version", "check-config", "digest"
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("candidate %s: %s: %v", e.Path, e.Check, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Check runs every check in order and stops at the first failure.
func Check(ctx context.Context, path string, opts Options) (*Result, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	fail := func(check string, err error) (*Result, error) {
		return nil, &Error{Path: path, Check: check, Err: err}
	}
	if path == "" {
		return fail("file", errors.New("no build path given (want --build PATH)"))
	}
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fail("file", errors.New("does not exist"))
		}
		return fail("file", err)
	}
	if !fi.Mode().IsRegular() {
		return fail("file", fmt.Errorf("is not a regular file (mode %s)", fi.Mode()))
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fail("executable", fmt.Errorf("is not executable (mode %s)", fi.Mode().Perm()))
	}
	res := &Result{Path: path}
	out, err := runCandidate(ctx, opts.Timeout, path, "--version")
	if err != nil {
		return fail("--version", err)
	}
	line := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "mcp-backend" {
		return fail("--version", fmt.Errorf("printed %q, want \"mcp-backend VERSION\"", line))
	}
	// urfave/cli prints "NAME version V"; the contract says "NAME V".
	if fields[1] == "version" && len(fields) > 2 {
		fields = fields[1:]
	}
	res.Version, res.VersionLine = fields[1], line
	if opts.Config != "" {
		if _, err := runCandidate(ctx, opts.Timeout, path, "check-config", "--config", opts.Config); err != nil {
			return fail("check-config", fmt.Errorf("config %s refused: %w", opts.Config, err))
		}
		res.ConfigChecked = opts.Config
	}
	d, err := buildinfo.FileDigest(path)
	if err != nil {
		return fail("digest", err)
	}
	res.Digest = d
	return res, nil
}

// Output the checks keep of a run: `--version` prints one line and
// check-config a line or an error; anything far beyond is not mcp-backend,
// and buffering it would let a candidate size our heap (600 MB of output
// once cost 2 GB).
const (
	maxStdout = 64 << 10
	maxStderr = 16 << 10
)

// errTooMuchOutput ends a run whose stdout passed maxStdout.
var errTooMuchOutput = fmt.Errorf("printed more than %d bytes on stdout: not an mcp-backend", maxStdout)

// runCandidate runs the build in a process group of its own, with a timeout,
// and returns its stdout; the error carries the exit status and the start of
// stderr. The whole group is killed when the run ends, however it ends, so a
// candidate's children never outlive the check.
func runCandidate(ctx context.Context, timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, overflow := context.WithCancelCause(ctx)
	defer overflow(nil)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	killGroup := func() error {
		// pgid == pid with Setpgid; ESRCH once everyone is gone.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}
	cmd.Cancel = killGroup
	stdout := &capped{max: maxStdout, over: func() { overflow(errTooMuchOutput) }}
	stderr := &capped{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second // a child holding the pipes open must not hang us
	if err := cmd.Start(); err != nil {
		return "", err
	}
	err := cmd.Wait()
	killGroup() // children the candidate left behind, even after a clean exit
	switch {
	case context.Cause(ctx) == errTooMuchOutput:
		return "", errTooMuchOutput
	case ctx.Err() == context.DeadlineExceeded:
		return "", fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		if msg != "" {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return stdout.String(), nil
}

// capped keeps the first max bytes written and drops the rest; over, when
// set, is called once when the cap is passed.
type capped struct {
	mu    sync.Mutex
	b     bytes.Buffer
	max   int
	total int
	over  func()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	was := c.total
	c.total += len(p)
	if was <= c.max && c.total > c.max && c.over != nil {
		c.over()
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
