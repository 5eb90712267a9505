package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/units"
)

// Every step the agent starts runs detached, as a transient unit of the
// host's systemd, and leaves its outcome in a file, so that a dropped
// connection or a dead controller neither cuts a step short nor loses what
// it did.

// StepUnitPrefix names the transient unit of a step.
const StepUnitPrefix = "mcpctl-fleet-"

// maxStepOutput bounds the stdout a wait returns (the step's --json
// report); stderr is kept to its last maxStepErr bytes.
const (
	maxStepOutput = 1 << 20
	maxStepErr    = 8 << 10
)

func connect(ctx context.Context) (*systemd.Client, error) {
	c, err := systemd.Connect(ctx, systemd.Options{})
	if err != nil {
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	return c, nil
}

// ReadFacts reads this host's facts; it changes nothing.
func ReadFacts(ctx context.Context, a *Facts) (*fleet.Facts, error) {
	cfg, err := ctlconfig.Load(a.Config, true)
	if err != nil {
		return nil, usagef("config: %v", err)
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
	if lockPath := filepath.Join(cfg.StateDir, state.LockFile); FlockHeld(lockPath) {
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
	client, err := connect(cctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	unit := func(name, u string) fleet.UnitFact {
		uf := fleet.UnitFact{Name: name, Unit: u}
		if s, err := client.Unit(cctx, u); err == nil {
			uf.ActiveState, uf.InvocationID = s.ActiveState, s.InvocationID
		}
		return uf
	}
	// Production is whichever slot (or pre-slot unit) accepts now.
	f.Backend = unit("backend", deploy.ServingUnit(cctx, client, cfg.Backend.Unit))
	for _, t := range cfg.Tunnels {
		f.Tunnels = append(f.Tunnels, unit(t.Name, t.Unit))
	}
	return f, nil
}

// Receive keeps r as the upload a describes once its digest checks out,
// and returns its path. The bytes go to a side file first: the blob's
// stable name never holds anything else.
func Receive(a *Upload, r io.Reader) (string, error) {
	digest := "sha256:" + a.SHA256
	path := BlobPath(a.FleetDir, digest)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("upload: %w", err)
	}
	if d, err := buildinfo.FileDigest(path); err == nil && d == digest {
		_, _ = io.Copy(io.Discard, r)
		return path, nil
	}
	side := filepath.Join(filepath.Dir(path), ".incoming-"+a.SHA256)
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

// StepUnit is the transient unit of step id.
func StepUnit(id string) string { return StepUnitPrefix + id + ".service" }

// StartStep starts a's step as its transient unit, running self's
// `fleet-agent exec`, and returns once that has been executed. A step with
// an outcome, or whose unit exists (a resumed controller), is not started
// again.
func StartStep(ctx context.Context, a *Start, self string) error {
	if _, err := os.Stat(stepFile(a.FleetDir, a.ID, ".json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(a.FleetDir, "steps"), 0o755); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	t := stepService(a, self)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := connect(cctx)
	if err != nil {
		return fmt.Errorf("start step %s: %w", a.ID, err)
	}
	defer c.Close()
	if err := c.StartTransientService(ctx, t); err != nil {
		// Started before (a resumed controller): the unit exists.
		if st, serr := unitState(ctx, t.Name); serr == nil && st != "" && st != "inactive" {
			return nil
		}
		return fmt.Errorf("start step %s: %w", a.ID, err)
	}
	return nil
}

// stepService is step a's unit, with the properties systemd-run gave it
// when the agent exec'd `systemd-run --unit=UNIT --collect
// --service-type=exec --description=DESC -- self fleet-agent exec ...`:
// its name, description, Type=exec, the command and CollectMode
// inactive-or-failed; KillMode, environment, working directory and slice
// stay systemd's defaults, as they were.
func stepService(a *Start, self string) systemd.TransientService {
	ex := &Exec{FleetDir: a.FleetDir, ID: a.ID, Step: a.Step}
	return systemd.TransientService{
		Name:        StepUnit(a.ID),
		Description: "mcpctl fleet step " + a.ID,
		Argv:        append([]string{self}, ex.Words()...),
	}
}

func unitState(ctx context.Context, unit string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := connect(cctx)
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

// RunStep runs inside the step's unit: self with the step's arguments,
// then its outcome, written atomically (the .json appears whole or not at
// all).
func RunStep(ctx context.Context, a *Exec, self string) error {
	outF, err := os.Create(stepFile(a.FleetDir, a.ID, ".out"))
	if err != nil {
		return err
	}
	defer outF.Close()
	errF, err := os.Create(stepFile(a.FleetDir, a.ID, ".err"))
	if err != nil {
		return err
	}
	defer errF.Close()
	res := fleet.StepResult{ID: a.ID, State: fleet.StepDone, Started: time.Now().UTC()}
	cmd := exec.CommandContext(ctx, self, a.Step.Argv()...)
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
	return atomicfs.WriteJSON(stepFile(a.FleetDir, a.ID, ".json"), res, 0o644)
}

// WaitStep returns the step's outcome once it has one, or state running
// after a.Timeout.
func WaitStep(ctx context.Context, a *Wait) (*fleet.StepResult, error) {
	end := time.Now().Add(a.Timeout)
	unit := StepUnit(a.ID)
	cctx, cancel := context.WithTimeout(ctx, a.Timeout+10*time.Second)
	defer cancel()
	client, err := connect(cctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	for {
		if b, err := os.ReadFile(stepFile(a.FleetDir, a.ID, ".json")); err == nil {
			var res fleet.StepResult
			if err := json.Unmarshal(b, &res); err != nil {
				return nil, fmt.Errorf("step %s outcome: %w", a.ID, err)
			}
			res.Stdout = readCapped(stepFile(a.FleetDir, a.ID, ".out"), maxStepOutput)
			res.Stderr = readCapped(stepFile(a.FleetDir, a.ID, ".err"), maxStepErr)
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
			if _, err := os.Stat(stepFile(a.FleetDir, a.ID, ".json")); err == nil {
				continue
			}
			if st == "" {
				return &fleet.StepResult{ID: a.ID, State: fleet.StepAbsent}, nil
			}
			return &fleet.StepResult{ID: a.ID, State: fleet.StepDone, ExitCode: 1, Stderr: "the step's unit ended " + st + " without recording an outcome"}, nil
		}
		if time.Now().After(end) {
			return &fleet.StepResult{ID: a.ID, State: fleet.StepRunning}, nil
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

// FlockHeld reports whether some process holds a flock(2) on path, from
// /proc/locks (device and inode), without taking it.
func FlockHeld(path string) bool {
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
