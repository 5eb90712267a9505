package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/fleet/sshrun"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/systemd"
	"github.com/overdeck/mcp-backend/units"
)

// The fleet agent is the host's side of `mcpctl fleet`: what the controller
// runs over SSH. Every step it starts runs detached, as a transient unit of
// the host's systemd, and leaves its outcome in a file, so that a dropped
// connection or a dead controller neither cuts a step short nor loses what
// it did.

// agentSteps are the mcpctl commands a fleet step may run on a host.
var agentSteps = [][]string{{"canary", "start"}, {"canary", "stop"}, {"stress"}, {"cutover"}, {"rollback"}}

// stepIDRE: a step id becomes a unit name and file names.
var stepIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,150}$`)

// stepUnitPrefix names the transient unit of a step.
const stepUnitPrefix = "mcpctl-fleet-"

func fleetAgentCommand(d *deps) *cli.Command {
	fleetDir := &cli.StringFlag{Name: "fleet-dir", Usage: "the fleet's `DIR` on this host (uploads, step outcomes)", Required: true}
	idFlag := &cli.StringFlag{Name: "id", Usage: "step `ID`", Required: true}
	return &cli.Command{
		Name:   "fleet-agent",
		Usage:  "the host's side of mcpctl fleet (run over SSH by the controller)",
		Hidden: true,
		Subcommands: []*cli.Command{
			{
				Name:  "facts",
				Usage: "print this host's facts as JSON; changes nothing",
				Flags: []cli.Flag{&cli.StringFlag{Name: "config", Usage: "mcpctl.json `FILE`", Required: true}},
				Action: func(c *cli.Context) error {
					f, err := agentFacts(c.Context, c.String("config"))
					if err != nil {
						return err
					}
					return writeJSON(d.stdout, f)
				},
			},
			{
				Name:  "upload",
				Usage: "keep stdin as <fleet-dir>/blobs/sha256-HEX once its sha256 is HEX; print the path",
				Flags: []cli.Flag{fleetDir, &cli.StringFlag{Name: "sha256", Usage: "`HEX` digest the upload must have", Required: true}},
				Action: func(c *cli.Context) error {
					p, err := agentUpload(c.String("fleet-dir"), c.String("sha256"), os.Stdin)
					if err != nil {
						return err
					}
					fmt.Fprintln(d.stdout, p)
					return nil
				},
			},
			{
				Name:      "start",
				Usage:     "start mcpctl ARGS detached as the transient unit of step ID (nothing when it exists)",
				ArgsUsage: "-- ARGS...",
				Flags:     []cli.Flag{fleetDir, idFlag},
				Action: func(c *cli.Context) error {
					return agentStart(c.Context, c.String("fleet-dir"), c.String("id"), c.Args().Slice())
				},
			},
			{
				Name:      "exec",
				Usage:     "run mcpctl ARGS and record the outcome of step ID (what the step's unit runs)",
				ArgsUsage: "-- ARGS...",
				Hidden:    true,
				Flags:     []cli.Flag{fleetDir, idFlag},
				Action: func(c *cli.Context) error {
					return agentExec(c.Context, c.String("fleet-dir"), c.String("id"), c.Args().Slice())
				},
			},
			{
				Name:  "wait",
				Usage: "print step ID's outcome as JSON once it has one, or state running after --timeout",
				Flags: []cli.Flag{fleetDir, idFlag, &cli.DurationFlag{Name: "timeout", Value: 20 * time.Second, Usage: "wait at most `D`"}},
				Action: func(c *cli.Context) error {
					res, err := agentWait(c.Context, c.String("fleet-dir"), c.String("id"), c.Duration("timeout"))
					if err != nil {
						return err
					}
					return writeJSON(d.stdout, res)
				},
			},
			{
				Name:  "gate",
				Usage: "the forced command of a restricted key: run SSH_ORIGINAL_COMMAND only if it is a fleet-agent command of this fleet",
				Flags: []cli.Flag{fleetDir, &cli.StringFlag{Name: "config", Usage: "when set, the only mcpctl.json `FILE` the key's commands may name"}},
				Action: func(c *cli.Context) error {
					argv, err := gateCommand(c.String("fleet-dir"), c.String("config"), d.getenv("SSH_ORIGINAL_COMMAND"))
					if err != nil {
						return withCode(126, err)
					}
					return syscall.Exec(argv[0], argv, os.Environ())
				},
			},
		},
	}
}

func agentFacts(ctx context.Context, cfgPath string) (*fleet.Facts, error) {
	cfg, err := ctlconfig.Load(cfgPath, true)
	if err != nil {
		return nil, usageError("config: %v", err)
	}
	f := &fleet.Facts{Agent: buildinfo.Version, Time: time.Now().UTC()}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		f.MachineID = strings.TrimSpace(string(b))
	}
	store := &release.Store{Root: cfg.Install.Root}
	if v, err := store.Current(); err == nil {
		f.Version = v
		if dg, err := buildinfo.FileDigest(units.CurrentBinary(cfg.Install.Root)); err == nil {
			f.Digest = dg
		}
	}
	sd := state.Dir(cfg.StateDir)
	if p, err := sd.ReadPending(); err == nil && p != nil {
		f.Pending = &fleet.PendingFact{SnapshotID: p.SnapshotID, ToVersion: p.ToVersion, Deadline: p.Deadline}
	}
	// Read, never taken: taking the lock even for a moment could make a
	// cutover starting at that moment refuse.
	if lockPath := filepath.Join(cfg.StateDir, state.LockFile); flockHeld(lockPath) {
		f.Locked = "mcpctl lock " + lockPath + " is held"
		if h := sd.ReadHolder(); h != nil {
			f.Locked = fmt.Sprintf("pid %d (%s) since %s", h.PID, h.Owner, h.Since.Format(time.RFC3339))
		}
	}
	var st syscall.Statfs_t
	for dir := cfg.Install.Root; ; dir = filepath.Dir(dir) {
		if syscall.Statfs(dir, &st) == nil {
			f.DiskFree = st.Bavail * uint64(st.Bsize)
			break
		}
		if dir == "/" {
			break
		}
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	if resp, err := hc.Get("http://" + cfg.Backend.Listen + "/healthz"); err != nil {
		f.HealthErr = err.Error()
	} else {
		resp.Body.Close()
		f.Healthy = resp.StatusCode == http.StatusOK
		if !f.Healthy {
			f.HealthErr = "/healthz " + resp.Status
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := systemd.Connect(cctx, systemd.Options{})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	defer client.Close()
	unit := func(name, u string) fleet.UnitFact {
		uf := fleet.UnitFact{Name: name, Unit: u}
		if s, err := client.Unit(cctx, u); err == nil {
			uf.ActiveState, uf.InvocationID = s.ActiveState, s.InvocationID
		}
		return uf
	}
	f.Backend = unit("backend", cfg.Backend.Unit)
	for _, t := range cfg.Tunnels {
		f.Tunnels = append(f.Tunnels, unit(t.Name, t.Unit))
	}
	return f, nil
}

var hexDigestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func agentUpload(fleetDir, hexDigest string, r io.Reader) (string, error) {
	if err := fleet.CheckRemotePath(fleetDir); err != nil {
		return "", usageError("--fleet-dir %q: %v", fleetDir, err)
	}
	if !hexDigestRE.MatchString(hexDigest) {
		return "", usageError("--sha256 %q: want 64 lowercase hex digits", hexDigest)
	}
	digest := "sha256:" + hexDigest
	path := sshrun.BlobPath(fleetDir, digest)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	if d, err := buildinfo.FileDigest(path); err == nil && d == digest {
		_, _ = io.Copy(io.Discard, r)
		return path, nil
	}
	// Into a side file first: the digest is checked before the blob's
	// stable name ever holds it.
	side := filepath.Join(filepath.Dir(path), ".incoming-"+hexDigest)
	got, err := atomicfs.WriteFrom(side, r, 0o755, nil)
	if err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	if got != digest {
		_ = os.Remove(side)
		return "", fmt.Errorf("upload: received %s, want %s: the upload was cut or changed; nothing kept", got, digest)
	}
	if err := os.Rename(side, path); err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	return path, atomicfs.SyncDir(filepath.Dir(path))
}

func stepFile(fleetDir, id, ext string) string {
	return filepath.Join(fleetDir, "steps", id+ext)
}

func checkStep(fleetDir, id string) error {
	if err := fleet.CheckRemotePath(fleetDir); err != nil {
		return usageError("--fleet-dir %q: %v", fleetDir, err)
	}
	if !stepIDRE.MatchString(id) {
		return usageError("--id %q: want 1-151 of a-z 0-9 _ -", id)
	}
	return nil
}

// allowedStep reports whether args (global flags, then the command) run
// one of agentSteps.
func allowedStep(args []string) error {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		if args[i] == "--config" {
			i++
		}
		i++
	}
	rest := args[min(i, len(args)):]
	for _, s := range agentSteps {
		if len(rest) >= len(s) && slicesEqual(rest[:len(s)], s) {
			return nil
		}
	}
	return usageError("fleet-agent runs only %v, not %q", agentSteps, strings.Join(rest, " "))
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func agentStart(ctx context.Context, fleetDir, id string, args []string) error {
	if err := checkStep(fleetDir, id); err != nil {
		return err
	}
	if err := allowedStep(args); err != nil {
		return err
	}
	if _, err := os.Stat(stepFile(fleetDir, id, ".json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(fleetDir, "steps"), 0o755); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate mcpctl: %w", err)
	}
	unit := stepUnitPrefix + id + ".service"
	argv := append([]string{"--unit=" + unit, "--collect", "--quiet", "--service-type=exec",
		"--description=mcpctl fleet step " + id, "--",
		self, "fleet-agent", "exec", "--fleet-dir", fleetDir, "--id", id, "--"}, args...)
	out, err := exec.CommandContext(ctx, "systemd-run", argv...).CombinedOutput()
	if err != nil {
		// Started before (a resumed controller): the unit exists.
		if st, serr := unitState(ctx, unit); serr == nil && st != "" && st != "inactive" {
			return nil
		}
		return fmt.Errorf("start step %s: systemd-run: %w: %s", id, err, bytes.TrimSpace(out))
	}
	return nil
}

// agentExec runs inside the step's unit: the step, then its outcome,
// written atomically (the .json appears whole or not at all).
func agentExec(ctx context.Context, fleetDir, id string, args []string) error {
	if err := checkStep(fleetDir, id); err != nil {
		return err
	}
	if err := allowedStep(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	outF, err := os.Create(stepFile(fleetDir, id, ".out"))
	if err != nil {
		return err
	}
	defer outF.Close()
	errF, err := os.Create(stepFile(fleetDir, id, ".err"))
	if err != nil {
		return err
	}
	defer errF.Close()
	res := fleet.StepResult{ID: id, State: fleet.StepDone, Started: time.Now().UTC()}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = outF, errF
	err = cmd.Run()
	res.Ended = time.Now().UTC()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if res.ExitCode < 0 {
			res.ExitCode = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	default:
		res.ExitCode = 1
		fmt.Fprintf(errF, "fleet-agent: %v\n", err)
	}
	_ = outF.Sync()
	_ = errF.Sync()
	return atomicfs.WriteJSON(stepFile(fleetDir, id, ".json"), res, 0o644)
}

func unitState(ctx context.Context, unit string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := systemd.Connect(cctx, systemd.Options{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := c.Unit(cctx, unit)
	if err != nil {
		return "", err
	}
	if s.LoadState == "not-found" {
		return "", nil
	}
	return s.ActiveState, nil
}

const maxStepOutput = 1 << 20

func agentWait(ctx context.Context, fleetDir, id string, timeout time.Duration) (*fleet.StepResult, error) {
	if err := checkStep(fleetDir, id); err != nil {
		return nil, err
	}
	end := time.Now().Add(timeout)
	unit := stepUnitPrefix + id + ".service"
	cctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	client, err := systemd.Connect(cctx, systemd.Options{})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	defer client.Close()
	for {
		if b, err := os.ReadFile(stepFile(fleetDir, id, ".json")); err == nil {
			var res fleet.StepResult
			if err := json.Unmarshal(b, &res); err != nil {
				return nil, fmt.Errorf("step %s outcome: %w", id, err)
			}
			res.Stdout = readCapped(stepFile(fleetDir, id, ".out"), maxStepOutput)
			res.Stderr = readCapped(stepFile(fleetDir, id, ".err"), 8<<10)
			return &res, nil
		}
		u, err := client.Unit(cctx, unit)
		if err != nil {
			return nil, err
		}
		st := u.ActiveState
		if u.LoadState == "not-found" {
			st = ""
		}
		if st == "" || st == "inactive" || st == "failed" {
			// The outcome is written before the unit ends: check once more.
			if _, err := os.Stat(stepFile(fleetDir, id, ".json")); err == nil {
				continue
			}
			if st == "" {
				return &fleet.StepResult{ID: id, State: fleet.StepAbsent}, nil
			}
			return &fleet.StepResult{ID: id, State: fleet.StepDone, ExitCode: 1, Stderr: "the step's unit ended " + st + " without recording an outcome"}, nil
		}
		if time.Now().After(end) {
			return &fleet.StepResult{ID: id, State: fleet.StepRunning}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readCapped returns at most the last n bytes of a file.
func readCapped(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}

// gateCommand checks a restricted key's original command: one of the
// fleet-agent commands, run by this mcpctl or by a blob of the fleet dir
// whose content has the digest its name says, every word a plain word.
func gateCommand(fleetDir, config, original string) ([]string, error) {
	words := strings.Fields(original)
	if len(words) < 3 || words[1] != "fleet-agent" {
		return nil, fmt.Errorf("refused: %q is not a fleet-agent command", original)
	}
	for _, w := range words {
		if err := sshrun.CheckWord(w); err != nil {
			return nil, fmt.Errorf("refused: %w", err)
		}
	}
	switch words[2] {
	case "facts", "upload", "start", "wait":
	default:
		return nil, fmt.Errorf("refused: fleet-agent %s is not allowed over a restricted key", words[2])
	}
	// The key's own fleet dir and (when pinned) mcpctl.json only: no
	// upload or step outcome lands anywhere else.
	for i := 3; i+1 < len(words); i++ {
		if words[i] == "--" {
			break
		}
		switch {
		case words[i] == "--fleet-dir" && words[i+1] != fleetDir:
			return nil, fmt.Errorf("refused: --fleet-dir %s is not this key's %s", words[i+1], fleetDir)
		case words[i] == "--config" && config != "" && words[i+1] != config:
			return nil, fmt.Errorf("refused: --config %s is not this key's %s", words[i+1], config)
		}
	}
	for i, w := range words {
		if strings.HasPrefix(w, "--fleet-dir=") || (config != "" && strings.HasPrefix(w, "--config=")) {
			return nil, fmt.Errorf("refused: word %d %q: give flags as two words", i, w)
		}
	}
	if words[2] == "start" {
		// The step's own --config, after "--", is pinned as well.
		for i := 3; i+1 < len(words); i++ {
			if words[i] == "--config" && config != "" && words[i+1] != config {
				return nil, fmt.Errorf("refused: step --config %s is not this key's %s", words[i+1], config)
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if words[0] != self {
		dir, name := filepath.Split(words[0])
		hexd, ok := strings.CutPrefix(name, "sha256-")
		if filepath.Clean(dir) != filepath.Join(fleetDir, "blobs") || !ok || !hexDigestRE.MatchString(hexd) {
			return nil, fmt.Errorf("refused: %s is neither this mcpctl nor an upload of %s", words[0], fleetDir)
		}
		if d, err := buildinfo.FileDigest(words[0]); err != nil || d != "sha256:"+hexd {
			return nil, fmt.Errorf("refused: %s does not have the digest its name says", words[0])
		}
	}
	return words, nil
}

// flockHeld reports whether some process holds a flock(2) on path, from
// /proc/locks (device and inode), without taking it.
func flockHeld(path string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's
		// line starts with "->" and shifts the fields by one.
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == want {
			return true
		}
	}
	return false
}
