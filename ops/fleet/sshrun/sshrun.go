// Package sshrun is the fleet's transport: the system's OpenSSH client, one
// multiplexed connection per host per run, strict host key checking against
// the inventory's known_hosts only, and a remote command line built only of
// words checked to be one word each on any shell. It implements
// fleet.Remote by running the host's `mcpctl fleet-agent`, each command
// encoded from its ops/fleet/agent struct (the definition the host's
// agent and gate decode).
package sshrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/fleet/agent"
)

// Runner runs ssh. Binary and Env are the client and its environment
// (tests point them elsewhere); ControlDir is the private directory of the
// multiplexing sockets.
type Runner struct {
	SSH        fleet.SSH
	ControlDir string
	// Env is the client's whole environment; nil means this process's.
	Env []string
}

// New makes a Runner with a fresh private control directory (mode 0700);
// Close ends the masters and removes it.
func New(ssh fleet.SSH) (*Runner, error) {
	sweepControlDirs(time.Now().Add(-2 * time.Hour))
	dir, err := os.MkdirTemp("", "mcpctl-ssh-")
	if err != nil {
		return nil, fmt.Errorf("ssh control dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ssh control dir: %w", err)
	}
	return &Runner{SSH: ssh, ControlDir: dir}, nil
}

// sweepControlDirs removes control directories a killed controller left,
// once older than any master could live (controlPersist is at most 1h).
func sweepControlDirs(before time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "mcpctl-ssh-*"))
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() && st.ModTime().Before(before) {
			_ = os.RemoveAll(d)
		}
	}
}

// Argv is the full ssh command line for running remote on h: every option
// explicit (-F none: no user or system config applies), the destination
// after "--", the remote words after it.
func (r *Runner) Argv(h *fleet.Host, remote ...string) ([]string, error) {
	for _, w := range remote {
		if err := agent.CheckWord(w); err != nil {
			return nil, err
		}
	}
	if strings.HasPrefix(h.Address, "-") || strings.HasPrefix(h.User, "-") {
		return nil, fmt.Errorf("host %s: address and user must not start with '-'", h.Name)
	}
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	argv := []string{r.SSH.Binary,
		"-F", "none",
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + r.SSH.KnownHosts,
		"-o", "GlobalKnownHostsFile=none",
		"-o", "UpdateHostKeys=no",
		"-o", "CheckHostIP=no",
		"-o", "IdentitiesOnly=yes",
		"-o", "IdentityAgent=none",
		"-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no",
		"-o", "ForwardAgent=no",
		"-o", "ClearAllForwardings=yes",
		"-o", "ConnectTimeout=" + secs(r.SSH.ConnectTimeout.D()),
		"-o", "ServerAliveInterval=" + secs(r.SSH.ServerAliveInterval.D()),
		"-o", "ServerAliveCountMax=3",
		"-o", "ControlMaster=auto",
		"-o", "ControlPath=" + filepath.Join(r.ControlDir, "%C"),
		"-o", "ControlPersist=" + secs(r.SSH.ControlPersist.D()),
		"-o", "LogLevel=ERROR",
	}
	argv = append(argv, "-i", r.SSH.Identity, "-x", "-T", "-p", strconv.Itoa(h.Port), "-l", h.User, "--", h.Address)
	return append(argv, remote...), nil
}

// run runs remote on h with stdin; ssh's own failures (exit 255: refused,
// timed out, host key) wrap fleet.ErrUnreachable.
func (r *Runner) run(ctx context.Context, h *fleet.Host, stdin io.Reader, remote ...string) (stdout []byte, code int, err error) {
	argv, err := r.Argv(h, remote...)
	if err != nil {
		return nil, -1, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.Env
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	cmd.Stdin = stdin
	// Files, not pipes: a master connection this command starts lives on
	// (ControlPersist) holding its stdout and stderr, and a pipe would
	// never reach EOF.
	outF, err := os.CreateTemp(r.ControlDir, "out-")
	if err != nil {
		return nil, -1, fmt.Errorf("ssh output: %w", err)
	}
	defer os.Remove(outF.Name())
	defer outF.Close()
	errF, err := os.CreateTemp(r.ControlDir, "err-")
	if err != nil {
		return nil, -1, fmt.Errorf("ssh output: %w", err)
	}
	defer os.Remove(errF.Name())
	defer errF.Close()
	cmd.Stdout, cmd.Stderr = outF, errF
	err = cmd.Run()
	stdout, _ = os.ReadFile(outF.Name())
	errb, _ := os.ReadFile(errF.Name())
	stderr := lastLines(strings.TrimSpace(string(errb)), 3)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout, 0, nil
	case errors.As(err, &ee) && ee.ExitCode() == 255:
		return stdout, 255, fmt.Errorf("host %s (%s@%s port %d): ssh: %s: %w", h.Name, h.User, h.Address, h.Port, stderr, fleet.ErrUnreachable)
	case errors.As(err, &ee):
		return stdout, ee.ExitCode(), fmt.Errorf("host %s: %s %s: exit %d: %s", h.Name, remote[1], remote[2], ee.ExitCode(), stderr)
	}
	return stdout, -1, fmt.Errorf("host %s: ssh: %w", h.Name, err)
}

// call runs prog with cmd's words on h.
func (r *Runner) call(ctx context.Context, h *fleet.Host, stdin io.Reader, prog string, cmd agent.Command) ([]byte, error) {
	out, _, err := r.run(ctx, h, stdin, append([]string{prog}, cmd.Words()...)...)
	return out, err
}

// Facts runs `agent fleet-agent facts` with the host's config.
func (r *Runner) Facts(ctx context.Context, h *fleet.Host) (*fleet.Facts, error) {
	out, err := r.call(ctx, h, nil, h.Agent, &agent.Facts{Config: h.Config})
	if err != nil {
		return nil, err
	}
	var f fleet.Facts
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, fmt.Errorf("host %s: facts: %w", h.Name, err)
	}
	return &f, nil
}

// Upload streams local over ssh's stdin to the host's agent, which keeps it
// as <fleetDir>/blobs/sha256-HEX once its digest checks out.
func (r *Runner) Upload(ctx context.Context, h *fleet.Host, local, digest string) (string, error) {
	f, err := os.Open(local)
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", local, err)
	}
	defer f.Close()
	out, err := r.call(ctx, h, f, h.Agent, &agent.Upload{FleetDir: h.FleetDir, SHA256: strings.TrimPrefix(digest, "sha256:")})
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(string(out))
	if want := agent.BlobPath(h.FleetDir, digest); p != want {
		return "", fmt.Errorf("host %s: upload answered %q, want %q", h.Name, p, want)
	}
	return p, nil
}

// Start runs `agent fleet-agent start --id ID -- ARGS`; ARGS must be a
// step the host's agent runs (agent.ParseStep), checked here first.
func (r *Runner) Start(ctx context.Context, h *fleet.Host, prog, id string, args []string) error {
	step, err := agent.ParseStep(args)
	if err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	_, err = r.call(ctx, h, nil, prog, &agent.Start{FleetDir: h.FleetDir, ID: id, Step: step})
	return err
}

// Wait runs `agent fleet-agent wait --id ID --timeout POLL`.
func (r *Runner) Wait(ctx context.Context, h *fleet.Host, prog, id string, poll time.Duration) (*fleet.StepResult, error) {
	out, err := r.call(ctx, h, nil, prog, &agent.Wait{FleetDir: h.FleetDir, ID: id, Timeout: poll})
	if err != nil {
		return nil, err
	}
	var res fleet.StepResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("host %s: wait %s: %w", h.Name, id, err)
	}
	return &res, nil
}

// Close ends every master connection of the run and removes the control
// directory.
func (r *Runner) Close(hosts []fleet.Host) {
	for i := range hosts {
		argv, err := r.Argv(&hosts[i])
		if err != nil {
			continue
		}
		// argv ends in "--", address: "-O exit" is an option of ssh.
		n := len(argv) - 2
		argv = append(append(argv[:n:n], "-O", "exit"), argv[n:]...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = r.Env
		_ = cmd.Run()
		cancel()
	}
	_ = os.RemoveAll(r.ControlDir)
}

// lastLines keeps the end of ssh's stderr: the banner of a changed host
// key is a screenful, its last lines say what happened.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
