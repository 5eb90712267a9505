package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/internal/atomicfs"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/systemd"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/units"
)

// InstallFacts is what install observes before deciding.
type InstallFacts struct {
	// Current is the version the current link names, "" when there is none.
	Current string
	// CurrentErr is an error reading the link other than its absence.
	CurrentErr   error
	Backend      *systemd.UnitState
	BackendUnit  string
	BackendPort  string
	PortFree     bool
	ConfigExists bool
	// TunnelsErr is ctlconfig's ValidateTunnels result: units and
	// verification need every tunnel's url and exec.
	TunnelsErr error
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
	if f.TunnelsErr != nil {
		p.Refusals = append(p.Refusals, f.TunnelsErr.Error())
	}
	if f.CurrentErr != nil {
		p.Refusals = append(p.Refusals, "reading the current link: "+f.CurrentErr.Error())
	}
	if f.Current != "" {
		p.Refusals = append(p.Refusals, fmt.Sprintf("production exists: current points to %q (use mcpctl cutover)", f.Current))
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
	DurationMs    float64          `json:"durationMs"`
}

func (r *InstallReport) step(name string, f func() error) error {
	start := time.Now()
	err := f()
	r.Steps = append(r.Steps, Step{Name: name, OK: err == nil, Err: errString(err), DurationMs: ms(time.Since(start))})
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// InstallOptions name the build.
type InstallOptions struct {
	Build string
	// Version defaults to what the build's --version prints.
	Version string
}

// RefusedError is a decision not to act: nothing was changed.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string {
	s := "refused"
	for i, r := range e.Reasons {
		if i == 0 {
			s += ": " + r
		} else {
			s += "; " + r
		}
	}
	return s
}

func (e *RefusedError) Is(target error) bool { return target == errRefused }

// IsRefused reports whether err is a refusal (nothing was changed).
func IsRefused(err error) bool { return errors.Is(err, errRefused) }

// Install performs a first install. A refusal returns a *RefusedError and
// changes nothing.
func Install(ctx context.Context, env *Env, opts InstallOptions) (*InstallReport, error) {
	start := time.Now()
	cfg := env.Config
	rep := &InstallReport{}
	defer func() { rep.DurationMs = ms(time.Since(start)) }()
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return rep, fmt.Errorf("stateDir %s: %w", cfg.StateDir, err)
	}
	unlock, err := state.Lock(cfg.StateDir, "install --build "+opts.Build)
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
	version := opts.Version
	if version == "" {
		version = cand.Version
	}
	if err := release.ValidateVersion(version); err != nil {
		return rep, env.refuse(state.ActionInstall, version, []string{fmt.Sprintf("version %q: %v", version, err)})
	}
	rep.Version, rep.Digest = version, cand.Digest
	log := env.log().With("op", "install", "version", version, "digest", cand.Digest)

	err = rep.run(ctx, env, version, cand.Digest, opts.Build)
	ev := state.Event{Action: state.ActionInstall, ToVersion: version, Outcome: state.OutcomeOK,
		Details: map[string]string{"digest": cand.Digest, "build": opts.Build}}
	if err != nil {
		ev.Outcome, ev.Reason = state.OutcomeFailed, err.Error()
		log.Error("install failed", "err", err)
	} else {
		rep.OK = true
		log.Info("installed")
	}
	if aerr := state.Audit(cfg.StateDir, ev); aerr != nil {
		err = errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return rep, err
}

func (rep *InstallReport) run(ctx context.Context, env *Env, version, digest, build string) error {
	cfg := env.Config
	sd := env.Systemd
	st := env.store()
	if err := rep.step("install release", func() error {
		_, _, err := st.Install(version, build)
		return err
	}); err != nil {
		return err
	}
	if err := rep.step("set current", func() error { return st.SetCurrent(version) }); err != nil {
		return err
	}
	if rep.Plan.WriteConfig {
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
		rep.UnitsWritten, err = WriteUnits(cfg.UnitDir, us)
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
	if err := rep.step("enable", func() error { return sd.Enable(ctx, enable...) }); err != nil {
		return err
	}
	start := []string{cfg.Backend.Unit}
	for _, t := range cfg.Tunnels {
		start = append(start, t.Unit)
	}
	start = append(start, units.WatchdogTimer)
	for _, u := range start {
		if err := rep.step("start "+u, func() error { return sd.Start(ctx, u) }); err != nil {
			return err
		}
		rep.Started = append(rep.Started, u)
	}
	backendURL := URL(cfg.Backend.Listen)
	if err := rep.step("backend ready", func() error { return env.waitReady(ctx, backendURL) }); err != nil {
		return err
	}
	var failed []error
	rep.Backend = env.verifier().Backend(ctx, backendURL, verify.Expect{Version: version, Digest: digest})
	if err := rep.Backend.Err(); err != nil {
		failed = append(failed, err)
	}
	for _, t := range cfg.Tunnels {
		// A tunnel may take a moment to listen after its start job.
		_ = env.waitReady(ctx, t.URL)
		tr := env.verifier().Tunnel(ctx, t.URL)
		tr.Target = t.Name + " " + t.URL
		rep.Tunnels = append(rep.Tunnels, tr)
		if err := tr.Err(); err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

func observeInstall(ctx context.Context, env *Env) (InstallFacts, error) {
	cfg := env.Config
	f := InstallFacts{BackendUnit: cfg.Backend.Unit, BackendPort: cfg.Backend.Listen, TunnelsErr: cfg.ValidateTunnels()}
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
	f.Backend = u
	f.PortFree = PortFree(cfg.Backend.Listen)
	if _, err := os.Stat(cfg.Backend.Config); err == nil {
		f.ConfigExists = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return f, fmt.Errorf("backend.config %s: %w", cfg.Backend.Config, err)
	}
	return f, nil
}

// refuse records a refusal and returns it.
func (e *Env) refuse(action, version string, reasons []string) error {
	err := &RefusedError{Reasons: reasons}
	e.log().Warn(action+" refused", "version", version, "reasons", reasons)
	if aerr := state.Audit(e.Config.StateDir, state.Event{Action: action, ToVersion: version, Outcome: state.OutcomeRefused, Reason: err.Error()}); aerr != nil {
		return errors.Join(err, fmt.Errorf("audit: %w", aerr))
	}
	return err
}
