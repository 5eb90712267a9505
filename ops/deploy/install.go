package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// InstallFacts is what install observes before deciding.
type InstallFacts struct {
	// Current is the version the current link names, "" when there is none.
	Current string
	// CurrentErr is an error reading the link other than its absence.
	CurrentErr   error
	Backend      *unitstate.State
	BackendUnit  string
	BackendPort  string
	PortFree     bool
	ConfigExists bool
}

// InstallPlan is the decision: refusals (nothing is done) or what to do.
type InstallPlan struct {
	Refusals    []string `json:"refusals,omitempty"`
	WriteConfig bool     `json:"writeConfig"`
}

// OK is true when install may proceed.
func (p InstallPlan) OK() bool { return len(p.Refusals) == 0 }

// PlanInstall decides whether a first install may run: production must not
// exist (no current link, backend unit neither loaded nor active) and
// nothing else may hold the backend's port.
func PlanInstall(f InstallFacts) InstallPlan {
	var p InstallPlan
	if f.CurrentErr != nil {
		p.Refusals = append(p.Refusals, "reading the current link: "+f.CurrentErr.Error())
	}
	if f.Current != "" {
		next := "use mcpctl cutover"
		if f.Backend != nil && f.Backend.ActiveState == "failed" {
			// A crash loop left it failed: install is not what brings it back.
			next = "it is failed: use mcpctl recover, then mcpctl cutover"
		}
		p.Refusals = append(p.Refusals, fmt.Sprintf("production exists: current points to %q (%s)", f.Current, next))
	}
	if active(f.Backend) {
		p.Refusals = append(p.Refusals, fmt.Sprintf("production exists: %s is %s (use mcpctl cutover)", f.BackendUnit, f.Backend.ActiveState))
	} else if loaded(f.Backend) {
		p.Refusals = append(p.Refusals, fmt.Sprintf("production exists: %s is loaded (%s) (use mcpctl cutover)", f.BackendUnit, f.Backend.FragmentPath))
	}
	if !f.PortFree && !active(f.Backend) {
		p.Refusals = append(p.Refusals, fmt.Sprintf("backend.listen %s is taken by another process", f.BackendPort))
	}
	p.WriteConfig = !f.ConfigExists
	return p
}

// Step is one executed step of a report.
type Step struct {
	Name       string  `json:"name"`
	OK         bool    `json:"ok"`
	Err        string  `json:"error,omitempty"`
	DurationMs float64 `json:"durationMs"`
}

// InstallReport is what install did.
type InstallReport struct {
	OK            bool             `json:"ok"`
	Version       string           `json:"version"`
	Digest        string           `json:"digest,omitempty"`
	Plan          InstallPlan      `json:"plan"`
	ConfigWritten bool             `json:"configWritten"`
	UnitsWritten  []string         `json:"unitsWritten,omitempty"`
	Started       []string         `json:"started,omitempty"`
	Steps         []Step           `json:"steps"`
	Backend       *verify.Report   `json:"backend,omitempty"`
	Tunnels       []*verify.Report `json:"tunnels,omitempty"`
	// Undo lists what a failed install took back, newest first; UndoOK is
	// true when every step of it succeeded (the host is as it was).
	Undo   []Step `json:"undo,omitempty"`
	UndoOK bool   `json:"undoOK,omitempty"`
	// Warnings are guardrails this host does not enforce (a host without
	// a cgroup v2 memory controller).
	Warnings   []string `json:"warnings,omitempty"`
	DurationMs float64  `json:"durationMs"`
}

func (r *InstallReport) step(name string, f func() error) error {
	start := time.Now()
	err := f()
	r.Steps = append(r.Steps, Step{Name: name, OK: err == nil, Err: errString(err), DurationMs: ms(time.Since(start))})
	return err
}

// ms is d as a ...Ms number, rounded as millis.Duration writes it.
func ms(d time.Duration) float64 { return millis.Duration(d).Ms() }

// InstallOptions name the build.
type InstallOptions struct {
	Build string
	// Version, when set, must equal what the build's --version prints (a
	// release is named by its build, never by the operator).
	Version string
}

// Install performs a first install. A refusal (exit 1) and a configuration
// problem (exit 2) change nothing. A failure after the first change is undone
// in reverse order, so that the host is as it was and a corrected retry can
// run; when the undo fails too the error's code is CodeRollbackFailed.
func Install(ctx context.Context, env *Env, opts InstallOptions) (*InstallReport, error) {
	start := time.Now()
	cfg := env.Config
	rep := &InstallReport{}
	defer func() { rep.DurationMs = ms(time.Since(start)) }()
	// Units and verification need every tunnel's url and exec.
	if err := cfg.ValidateTunnels(); err != nil {
		return rep, usage(err.Error())
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return rep, fmt.Errorf("stateDir %s: %w", cfg.StateDir, err)
	}
	unlock, err := env.lock(ctx, "install --build "+opts.Build, 0)
	if err != nil {
		return rep, err
	}
	defer unlock()

	facts, err := observeInstall(ctx, env)
	if err != nil {
		return rep, err
	}
	rep.Plan = PlanInstall(facts)
	if !rep.Plan.OK() {
		return rep, env.refuse(state.ActionInstall, "", rep.Plan.Refusals)
	}

	// The candidate checks its config before anything is written: the
	// existing one, or the defaults install would write.
	checkCfg := cfg.Backend.Config
	if rep.Plan.WriteConfig {
		tmp, err := os.CreateTemp(cfg.StateDir, "install-config-*.json")
		if err != nil {
			return rep, fmt.Errorf("temp config: %w", err)
		}
		defer os.Remove(tmp.Name())
		_, werr := tmp.Write(DefaultBackendConfig(cfg.Backend.Listen))
		if cerr := tmp.Close(); werr != nil || cerr != nil {
			return rep, fmt.Errorf("temp config: %w", errors.Join(werr, cerr))
		}
		checkCfg = tmp.Name()
	}
	cand, err := candidate.Check(ctx, opts.Build, candidate.Options{Config: checkCfg})
	if err != nil {
		return rep, env.refuse(state.ActionInstall, opts.Version, []string{err.Error()})
	}
	if err := checkVersion(cand, opts.Version); err != nil {
		return rep, env.audited(state.ActionInstall, opts.Version, err)
	}
	version := cand.Version
	rep.Version, rep.Digest = version, cand.Digest
	log := env.log().With("op", "install", "version", version, "digest", cand.Digest)

	u := &undoer{}
	err = rep.run(ctx, env, u, cand, opts.Build)
	ev := state.Event{Action: state.ActionInstall, ToVersion: version, Outcome: state.OutcomeOK,
		Details: map[string]string{"digest": cand.Digest, "build": opts.Build}}
	if err != nil {
		log.Error("install failed: undoing", "err", err)
		// The undo must run even when ctx was cancelled (an interrupted
		// install), but not forever.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		rep.Undo = u.run(uctx)
		cancel()
		rep.UndoOK = true
		var undoErrs []error
		for _, s := range rep.Undo {
			if !s.OK {
				rep.UndoOK = false
				undoErrs = append(undoErrs, fmt.Errorf("%s: %s", s.Name, s.Err))
			}
		}
		ev.Outcome, ev.Reason = state.OutcomeFailed, err.Error()
		ev.Details["undone"] = fmt.Sprint(rep.UndoOK)
		if !rep.UndoOK {
			err = undoFailed(err, errors.Join(undoErrs...))
			log.Error("undo failed: a human is needed", "err", err)
		}
	} else {
		rep.OK = true
		log.Info("installed")
	}
	if aerr := env.state().Audit(ev); aerr != nil {
		err = errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return rep, err
}

// undoer collects how to take back each change, to run newest first.
type undoer struct {
	steps []undoStep
}

type undoStep struct {
	name string
	f    func(ctx context.Context) error
}

func (u *undoer) push(name string, f func(ctx context.Context) error) {
	u.steps = append(u.steps, undoStep{name, f})
}

// run takes every change back, newest first, and goes on past a failed
// step: each later step undoes something independent or older.
func (u *undoer) run(ctx context.Context) []Step {
	var out []Step
	for i := len(u.steps) - 1; i >= 0; i-- {
		s := u.steps[i]
		begin := time.Now()
		err := s.f(ctx)
		out = append(out, Step{Name: s.name, OK: err == nil, Err: errString(err), DurationMs: ms(time.Since(begin))})
	}
	return out
}

func (rep *InstallReport) run(ctx context.Context, env *Env, undo *undoer, cand *candidate.Result, build string) error {
	cfg := env.Config
	sd := env.Systemd
	st := env.store()
	version := cand.Version
	if err := rep.step("install release", func() error {
		_, created, err := st.Install(version, build)
		if created {
			undo.push("remove release "+version, func(context.Context) error { return st.Remove(version) })
		}
		return err
	}); err != nil {
		return err
	}
	// Planned: there was no current link.
	undo.push("remove current", func(context.Context) error { return atomicfs.Remove(st.CurrentPath()) })
	if err := rep.step("set current", func() error {
		if err := st.SetCurrent(version); err != nil {
			return err
		}
		return env.settleSlots(version)
	}); err != nil {
		return err
	}
	if rep.Plan.WriteConfig {
		undo.push("remove backend config", func(context.Context) error { return atomicfs.Remove(cfg.Backend.Config) })
		if err := rep.step("write backend config", func() error {
			if err := os.MkdirAll(filepath.Dir(cfg.Backend.Config), 0o755); err != nil {
				return err
			}
			return atomicfs.WriteFile(cfg.Backend.Config, DefaultBackendConfig(cfg.Backend.Listen), 0o644)
		}); err != nil {
			return err
		}
		rep.ConfigWritten = true
	}
	var us []units.Unit
	if err := rep.step("install units", func() error {
		var err error
		if us, err = env.render(""); err != nil {
			return err
		}
		prev, err := readUnits(cfg.UnitDir, us)
		if err != nil {
			return err
		}
		undo.push("restore units", func(ctx context.Context) error { return restoreUnits(ctx, sd, cfg.UnitDir, prev) })
		rep.UnitsWritten, err = units.Sync(cfg.UnitDir, us)
		return err
	}); err != nil {
		return err
	}
	if err := rep.step("daemon-reload", func() error { return sd.DaemonReload(ctx) }); err != nil {
		return err
	}
	var enable []string
	for _, u := range us {
		if u.Enable {
			enable = append(enable, u.Name)
		}
	}
	undo.push("disable", func(ctx context.Context) error { return sd.Disable(ctx, enable...) })
	if err := rep.step("enable", func() error { return sd.Enable(ctx, enable...) }); err != nil {
		return err
	}
	// The socket first: it owns the port before the backend that takes it.
	start := []string{env.socketUnit(), units.SlotUnit(cfg.Backend.Unit, units.BootSlot)}
	for _, t := range cfg.Tunnels {
		start = append(start, t.Unit)
	}
	start = append(start, units.WatchdogTimer)
	for _, u := range start {
		// Pushed before the start: a start that fails may leave the unit
		// activating or failed, and that must be taken back too.
		stop := []string{u}
		if u == units.WatchdogTimer {
			stop = append(stop, units.WatchdogService) // the timer may have fired
		}
		undo.push("stop "+strings.Join(stop, " "), func(ctx context.Context) error { return stopUnits(ctx, sd, stop...) })
		if err := rep.step("start "+u, func() error { return sd.Start(ctx, u) }); err != nil {
			return err
		}
		rep.Started = append(rep.Started, u)
	}
	backendURL := URL(cfg.Backend.Listen)
	if err := rep.step("backend ready", func() error { return env.waitReady(ctx, backendURL, "", env.readyTimeout()) }); err != nil {
		return err
	}
	var failed []error
	// The build is identified by what it prints and by its digest, never
	// by a name typed by the operator.
	rep.Backend = env.verifier().Backend(ctx, backendURL, verify.Expect{Version: cand.Version, Digest: cand.Digest})
	if err := rep.Backend.Err(); err != nil {
		failed = append(failed, err)
	}
	for _, t := range cfg.Tunnels {
		// A tunnel may take a moment to listen after its start job.
		_ = env.waitReady(ctx, t.URL, "", env.readyTimeout())
		tr := env.verifier().Tunnel(ctx, t.URL)
		tr.Target = t.Name + " " + t.URL
		rep.Tunnels = append(rep.Tunnels, tr)
		if err := tr.Err(); err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// readUnits returns the current content of each unit's file in dir, nil
// for the ones that do not exist.
func readUnits(dir string, us []units.Unit) (map[string][]byte, error) {
	prev := make(map[string][]byte, len(us))
	for _, u := range us {
		b, err := os.ReadFile(filepath.Join(dir, u.Name))
		switch {
		case err == nil:
			prev[u.Name] = b
		case errors.Is(err, os.ErrNotExist):
			prev[u.Name] = nil
		default:
			return nil, fmt.Errorf("read unit %s: %w", u.Name, err)
		}
	}
	return prev, nil
}

// restoreUnits puts every unit file back as readUnits found it (removing
// the new ones) and reloads systemd.
func restoreUnits(ctx context.Context, sd Systemd, dir string, prev map[string][]byte) error {
	var errs []error
	for name, b := range prev {
		p := filepath.Join(dir, name)
		if b == nil {
			errs = append(errs, atomicfs.Remove(p))
		} else {
			errs = append(errs, atomicfs.WriteFile(p, b, 0o644))
		}
	}
	errs = append(errs, sd.DaemonReload(ctx))
	return errors.Join(errs...)
}

// stopUnits stops each unit and clears a failed state, so that systemd
// forgets it once its file is gone. A unit systemd does not know is
// already stopped.
func stopUnits(ctx context.Context, sd Systemd, names ...string) error {
	var errs []error
	for _, n := range names {
		u, err := sd.Unit(ctx, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !loaded(u) && !active(u) && u.ActiveState != "failed" {
			continue
		}
		if err := sd.Stop(ctx, n); err != nil {
			errs = append(errs, err)
		}
		_ = sd.ResetFailed(ctx, n) // not failed is fine
	}
	return errors.Join(errs...)
}

func observeInstall(ctx context.Context, env *Env) (InstallFacts, error) {
	cfg := env.Config
	f := InstallFacts{BackendUnit: cfg.Backend.Unit, BackendPort: cfg.Backend.Listen}
	cur, err := env.store().Current()
	switch {
	case err == nil:
		f.Current = cur
	case errors.Is(err, release.ErrNoCurrent):
	default:
		f.CurrentErr = err
	}
	u, err := env.Systemd.Unit(ctx, cfg.Backend.Unit)
	if err != nil {
		return f, fmt.Errorf("read %s: %w", cfg.Backend.Unit, err)
	}
	if !loaded(u) {
		// Production is the slots (the legacy unit only on older installs).
		boot := units.SlotUnit(cfg.Backend.Unit, units.BootSlot)
		if u, err = env.Systemd.Unit(ctx, boot); err != nil {
			return f, fmt.Errorf("read %s: %w", boot, err)
		}
		f.BackendUnit = boot
	}
	f.Backend = u
	f.PortFree = PortFree(cfg.Backend.Listen)
	if _, err := os.Stat(cfg.Backend.Config); err == nil {
		f.ConfigExists = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return f, fmt.Errorf("backend.config %s: %w", cfg.Backend.Config, err)
	}
	return f, nil
}

// audited records err (a usage error) as a refusal and returns it.
func (e *Env) audited(action, version string, err error) error {
	e.log().Warn(action+" refused", "version", version, "err", err)
	if aerr := e.state().Audit(state.Event{Action: action, ToVersion: version, Outcome: state.OutcomeRefused, Reason: err.Error()}); aerr != nil {
		return errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return err
}

// refuse records a refusal and returns it.
func (e *Env) refuse(action, version string, reasons []string) error {
	err := refused(reasons)
	e.log().Warn(action+" refused", "version", version, "reasons", reasons)
	if aerr := e.state().Audit(state.Event{Action: action, ToVersion: version, Outcome: state.OutcomeRefused, Reason: err.Error()}); aerr != nil {
		return errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return err
}
