package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// CanaryFacts is what canary start observes before deciding.
type CanaryFacts struct {
	Production     *unitstate.State
	ProductionUnit string
	Canary         *unitstate.State
	CanaryUnit     string
	CanaryListen   string
	CanaryPortFree bool
	// CanarySocketActive: the canary's own socket unit holds the port (left
	// listening by an earlier canary).
	CanarySocketActive bool
	// Existing is the installed release of the candidate's version, if any.
	Existing *release.Release
	Version  string
	Digest   string
}

// CanaryPlan is the decision of canary start.
type CanaryPlan struct {
	Refusals []string `json:"refusals,omitempty"`
	// StopOld: a previous canary runs and holds the port; it is replaced.
	StopOld bool `json:"stopOld"`
}

// OK is true when the canary may start.
func (p CanaryPlan) OK() bool { return len(p.Refusals) == 0 }

// PlanCanary decides whether a checked candidate may start as the canary.
func PlanCanary(f CanaryFacts) CanaryPlan {
	var p CanaryPlan
	if !active(f.Production) {
		state := "not loaded"
		if f.Production != nil && f.Production.ActiveState != "" {
			state = f.Production.ActiveState
		}
		p.Refusals = append(p.Refusals, fmt.Sprintf("production %s is %s: a canary proves itself beside a running production (run mcpctl install first)", f.ProductionUnit, state))
	}
	if active(f.Canary) {
		p.StopOld = true
	} else if !f.CanaryPortFree && !f.CanarySocketActive {
		p.Refusals = append(p.Refusals, fmt.Sprintf("canary.listen %s is taken by another process (%s is not running)", f.CanaryListen, f.CanaryUnit))
	}
	if f.Existing != nil && f.Existing.Digest != f.Digest {
		p.Refusals = append(p.Refusals, fmt.Sprintf("release %q is installed with build %s, the candidate is %s: a new build needs a new version stamp", f.Version, f.Existing.Digest, f.Digest))
	}
	return p
}

// Identity is a unit's process identity at one moment.
type Identity struct {
	ActiveState  string `json:"activeState"`
	MainPID      uint32 `json:"mainPID"`
	InvocationID string `json:"invocationID"`
}

func identity(u *unitstate.State) Identity {
	if u == nil {
		return Identity{}
	}
	return Identity{ActiveState: u.ActiveState, MainPID: u.MainPID, InvocationID: u.InvocationID}
}

// ProductionProof shows production was untouched while the canary started.
type ProductionProof struct {
	Unit            string   `json:"unit"`
	URL             string   `json:"url"`
	Before          Identity `json:"before"`
	After           Identity `json:"after"`
	HealthzSamples  int      `json:"healthzSamples"`
	HealthzFailures int      `json:"healthzFailures"`
	FirstFailure    string   `json:"firstFailure,omitempty"`
}

// Problems lists what disproves "production untouched"; empty is a pass.
func (p ProductionProof) Problems() []string {
	var out []string
	if p.Before.MainPID == 0 || p.Before.InvocationID == "" {
		out = append(out, "production identity before is unknown")
	}
	if p.Before != p.After {
		out = append(out, fmt.Sprintf("production changed: MainPID %d -> %d, InvocationID %s -> %s", p.Before.MainPID, p.After.MainPID, p.Before.InvocationID, p.After.InvocationID))
	}
	if p.HealthzSamples == 0 {
		out = append(out, "production /healthz was never sampled")
	}
	if p.HealthzFailures > 0 {
		out = append(out, fmt.Sprintf("production /healthz failed %d of %d samples (first: %s)", p.HealthzFailures, p.HealthzSamples, p.FirstFailure))
	}
	return out
}

// CanaryReport is what canary start did.
type CanaryReport struct {
	Pass       bool            `json:"pass"`
	Version    string          `json:"version"`
	Digest     string          `json:"digest,omitempty"`
	Build      string          `json:"build"`
	URL        string          `json:"url"`
	Plan       CanaryPlan      `json:"plan"`
	Steps      []Step          `json:"steps"`
	Canary     *verify.Report  `json:"canary,omitempty"`
	Production ProductionProof `json:"production"`
	Problems   []string        `json:"problems,omitempty"`
	Stopped    bool            `json:"stoppedAfterFailure,omitempty"`
	DurationMs float64         `json:"durationMs"`
}

// CanaryOptions name the candidate.
type CanaryOptions struct {
	Build string
	// Version, when set, must equal what the build's --version prints.
	Version string
}

// sampler polls a URL's /healthz until stopped.
type sampler struct {
	mu       sync.Mutex
	samples  int
	failures int
	first    string
	stop     chan struct{}
	done     chan struct{}
}

func startSampler(ctx context.Context, v *verify.Client, url string, every time.Duration) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample(ctx, v, url)
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample(ctx context.Context, v *verify.Client, url string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	code, _, err := v.Healthz(ctx, url)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if err != nil || code != 200 {
		s.failures++
		if s.first == "" {
			if err != nil {
				s.first = err.Error()
			} else {
				s.first = fmt.Sprintf("HTTP %d", code)
			}
		}
	}
}

// finish takes one last sample after the last step and stops.
func (s *sampler) finish(ctx context.Context, v *verify.Client, url string) (samples, failures int, first string) {
	close(s.stop)
	<-s.done
	s.sample(ctx, v, url)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.failures, s.first
}

// CanaryStart checks the candidate, installs it as a release (never touching
// current), and runs it as the canary unit beside production, proving both
// that it serves and that production was untouched. The verdict is recorded
// by the build's digest. A refusal (exit 1) or a configuration problem
// (exit 2) starts nothing.
func CanaryStart(ctx context.Context, env *Env, opts CanaryOptions) (*CanaryReport, error) {
	begin := time.Now()
	cfg := env.Config
	rep := &CanaryReport{Build: opts.Build, URL: URL(cfg.Canary.Listen)}
	rec := &InstallReport{}
	defer func() { rep.Steps = rec.Steps; rep.DurationMs = ms(time.Since(begin)) }()
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return rep, fmt.Errorf("stateDir %s: %w", cfg.StateDir, err)
	}
	unlock, err := env.lock(ctx, "canary start --build "+opts.Build, 0)
	if err != nil {
		return rep, err
	}
	defer unlock()

	// The canary runs production's config on its own port: without a
	// readable JSON object there, there is nothing to prove.
	prodCfg, err := os.ReadFile(cfg.Backend.Config)
	if err != nil {
		return rep, env.audited(state.ActionCanary, opts.Version, usage(fmt.Sprintf("backend.config: %v (the canary runs production's config; run mcpctl install first)", err)))
	}
	canaryCfg, err := WithListen(prodCfg, cfg.Canary.Listen)
	if err != nil {
		return rep, env.audited(state.ActionCanary, opts.Version, usage(fmt.Sprintf("backend.config %s: %v", cfg.Backend.Config, err)))
	}
	tmp := filepath.Join(cfg.StateDir, fmt.Sprintf("canary-config-%d.json", os.Getpid()))
	if err := os.WriteFile(tmp, canaryCfg, 0o600); err != nil {
		return rep, fmt.Errorf("temp canary config: %w", err)
	}
	defer os.Remove(tmp)
	cand, err := candidate.Check(ctx, opts.Build, candidate.Options{Config: tmp})
	if err != nil {
		return rep, env.refuse(state.ActionCanary, opts.Version, []string{err.Error()})
	}
	if err := checkVersion(cand, opts.Version); err != nil {
		return rep, env.audited(state.ActionCanary, opts.Version, err)
	}
	version := cand.Version
	rep.Version, rep.Digest = version, cand.Digest

	facts, err := observeCanary(ctx, env, version, cand.Digest)
	if err != nil {
		return rep, err
	}
	rep.Plan = PlanCanary(facts)
	if !rep.Plan.OK() {
		return rep, env.refuse(state.ActionCanary, version, rep.Plan.Refusals)
	}
	log := env.log().With("op", "canary", "version", version, "digest", cand.Digest)
	v := env.verifier()
	prodURL := URL(cfg.Backend.Listen)
	rep.Production = ProductionProof{Unit: facts.ProductionUnit, URL: prodURL, Before: identity(facts.Production)}
	smp := startSampler(ctx, v, prodURL, env.sampleEvery())

	runErr := rep.start(ctx, env, rec, canaryCfg, cand, version)
	if runErr == nil {
		// Identified by what the build prints and by its digest.
		rep.Canary = v.Backend(ctx, rep.URL, verify.Expect{Version: cand.Version, Digest: cand.Digest})
		runErr = rep.Canary.Err()
	}
	rep.Production.HealthzSamples, rep.Production.HealthzFailures, rep.Production.FirstFailure = smp.finish(ctx, v, prodURL)
	after, err := env.Systemd.Unit(ctx, facts.ProductionUnit)
	if err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("read %s after: %w", facts.ProductionUnit, err))
	}
	rep.Production.After = identity(after)
	if runErr != nil {
		rep.Problems = append(rep.Problems, runErr.Error())
	}
	rep.Problems = append(rep.Problems, rep.Production.Problems()...)
	rep.Pass = len(rep.Problems) == 0

	var errs []error
	if !rep.Pass {
		// A failed canary does not keep running: the journal keeps its logs.
		if err := env.Systemd.Stop(ctx, cfg.Canary.Unit); err == nil {
			rep.Stopped = true
		}
		errs = append(errs, fmt.Errorf("canary %s failed: %s", version, strings.Join(rep.Problems, "; ")))
		log.Error("canary failed", "problems", rep.Problems)
	} else {
		log.Info("canary passed", "samples", rep.Production.HealthzSamples)
	}
	summary := "pass"
	if !rep.Pass {
		summary = strings.Join(rep.Problems, "; ")
	}
	if err := env.state().RecordVerdict(state.Verdict{Kind: state.KindCanary, Digest: cand.Digest, Version: version, Pass: rep.Pass, Summary: summary}); err != nil {
		errs = append(errs, fmt.Errorf("record verdict: %w", err))
	}
	if err := env.state().WriteCanary(state.CanaryRecord{Version: version, Digest: cand.Digest, Build: opts.Build, Started: begin, Pass: rep.Pass}); err != nil {
		errs = append(errs, err)
	}
	outcome := state.OutcomeOK
	if !rep.Pass {
		outcome = state.OutcomeFailed
	}
	if err := env.state().Audit(state.Event{Action: state.ActionCanary, ToVersion: version, Outcome: outcome, Reason: summary,
		Details: map[string]string{"digest": cand.Digest, "build": opts.Build}}); err != nil {
		errs = append(errs, fmt.Errorf("audit: %w", err))
	}
	return rep, errors.Join(errs...)
}

// start installs the release, the config and the unit, and starts the
// canary until it answers /healthz and /readyz.
func (rep *CanaryReport) start(ctx context.Context, env *Env, rec *InstallReport, canaryCfg []byte, cand *candidate.Result, version string) error {
	cfg := env.Config
	sd := env.Systemd
	if rep.Plan.StopOld {
		if err := rec.step("stop previous canary", func() error { return sd.Stop(ctx, cfg.Canary.Unit) }); err != nil {
			return err
		}
	}
	var rel *release.Release
	if err := rec.step("install release", func() error {
		var err error
		rel, _, err = env.store().Install(version, cand.Path)
		return err
	}); err != nil {
		return err
	}
	if err := rec.step("write canary config", func() error {
		if err := os.MkdirAll(filepath.Dir(cfg.Canary.Config), 0o755); err != nil {
			return err
		}
		return atomicfs.WriteFile(cfg.Canary.Config, canaryCfg, 0o644)
	}); err != nil {
		return err
	}
	if err := rec.step("install canary unit", func() error {
		us, err := env.render(rel.Binary())
		if err != nil {
			return err
		}
		var write []units.Unit
		for _, u := range us {
			if u.Name == cfg.Canary.Unit || u.Name == units.Socket(cfg.Canary.Unit) {
				write = append(write, u)
			}
		}
		if len(write) != 2 {
			return fmt.Errorf("render produced no %s with its socket", cfg.Canary.Unit)
		}
		_, err = units.Sync(cfg.UnitDir, write)
		return err
	}); err != nil {
		return err
	}
	if err := rec.step("daemon-reload", func() error { return sd.DaemonReload(ctx) }); err != nil {
		return err
	}
	// A previous failed canary (or its socket) must not block the start.
	_ = sd.ResetFailed(ctx, units.Socket(cfg.Canary.Unit))
	_ = sd.ResetFailed(ctx, cfg.Canary.Unit)
	if err := rec.step("start "+cfg.Canary.Unit, func() error { return sd.Start(ctx, cfg.Canary.Unit) }); err != nil {
		return err
	}
	return rec.step("canary ready", func() error { return env.waitReady(ctx, rep.URL, "", env.readyTimeout()) })
}

func observeCanary(ctx context.Context, env *Env, version, digest string) (CanaryFacts, error) {
	cfg := env.Config
	f := CanaryFacts{ProductionUnit: env.ProductionUnit(ctx), CanaryUnit: cfg.Canary.Unit, CanaryListen: cfg.Canary.Listen, Version: version, Digest: digest}
	var err error
	if f.Production, err = env.Systemd.Unit(ctx, f.ProductionUnit); err != nil {
		return f, fmt.Errorf("read %s: %w", f.ProductionUnit, err)
	}
	if f.Canary, err = env.Systemd.Unit(ctx, cfg.Canary.Unit); err != nil {
		return f, fmt.Errorf("read %s: %w", cfg.Canary.Unit, err)
	}
	f.CanaryPortFree = PortFree(cfg.Canary.Listen)
	f.CanarySocketActive = env.socketFact(ctx, units.Socket(cfg.Canary.Unit)).Active()
	rel, err := env.store().Get(version)
	switch {
	case err == nil:
		f.Existing = rel
	case errors.Is(err, release.ErrNotFound):
	default:
		return f, fmt.Errorf("release %s: %w", version, err)
	}
	return f, nil
}

// CanaryStatus is what canary status shows.
type CanaryStatus struct {
	Unit         string              `json:"unit"`
	URL          string              `json:"url"`
	LoadState    string              `json:"loadState"`
	ActiveState  string              `json:"activeState"`
	SubState     string              `json:"subState"`
	MainPID      uint32              `json:"mainPID"`
	InvocationID string              `json:"invocationID,omitempty"`
	Since        time.Time           `json:"since,omitzero"`
	NRestarts    uint32              `json:"nRestarts"`
	Record       *state.CanaryRecord `json:"record,omitempty"`
	Healthz      int                 `json:"healthz"`
	Readyz       int                 `json:"readyz"`
	Version      string              `json:"version,omitempty"`
	Build        string              `json:"build,omitempty"`
	Err          string              `json:"error,omitempty"`
}

// Status reads the canary unit, its record and probes it.
func Status(ctx context.Context, env *Env) (*CanaryStatus, error) {
	cfg := env.Config
	st := &CanaryStatus{Unit: cfg.Canary.Unit, URL: URL(cfg.Canary.Listen)}
	u, err := env.Systemd.Unit(ctx, cfg.Canary.Unit)
	if err != nil {
		return st, fmt.Errorf("read %s: %w", cfg.Canary.Unit, err)
	}
	st.LoadState, st.ActiveState, st.SubState = u.LoadState, u.ActiveState, u.SubState
	st.MainPID, st.InvocationID, st.Since, st.NRestarts = u.MainPID, u.InvocationID, u.ActiveEnterTimestamp, u.NRestarts
	st.Record, err = env.state().ReadCanary()
	if err != nil {
		return st, err
	}
	if active(u) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v := env.verifier()
		st.Healthz, _, _ = v.Healthz(pctx, st.URL)
		st.Readyz, _, _ = v.Readyz(pctx, st.URL)
		st.Version, st.Build, err = v.SystemInfo(pctx, st.URL)
		st.Err = errString(err)
	}
	return st, nil
}

// StopReport is what canary stop did.
type StopReport struct {
	Unit           string `json:"unit"`
	WasActive      bool   `json:"wasActive"`
	UnitRemoved    bool   `json:"unitRemoved"`
	Version        string `json:"version,omitempty"`
	ReleaseRemoved bool   `json:"releaseRemoved"`
	KeptReason     string `json:"keptReason,omitempty"`
}

// Stop stops the canary, removes its unit file and its release unless that
// release is current.
func Stop(ctx context.Context, env *Env) (*StopReport, error) {
	cfg := env.Config
	rep := &StopReport{Unit: cfg.Canary.Unit}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return rep, fmt.Errorf("stateDir %s: %w", cfg.StateDir, err)
	}
	unlock, err := env.lock(ctx, "canary stop", 0)
	if err != nil {
		return rep, err
	}
	defer unlock()
	u, err := env.Systemd.Unit(ctx, cfg.Canary.Unit)
	if err != nil {
		return rep, fmt.Errorf("read %s: %w", cfg.Canary.Unit, err)
	}
	rep.WasActive = active(u)
	// The service, then its socket: stopping the socket first would make
	// systemd stop the service through its Requires= anyway.
	for _, name := range []string{cfg.Canary.Unit, units.Socket(cfg.Canary.Unit)} {
		if err := stopUnits(ctx, env.Systemd, name); err != nil {
			return rep, fmt.Errorf("stop %s: %w", name, err)
		}
		p := filepath.Join(cfg.UnitDir, name)
		if err := atomicfs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return rep, fmt.Errorf("remove %s: %w", p, err)
		}
	}
	rep.UnitRemoved = true
	if err := env.Systemd.DaemonReload(ctx); err != nil {
		return rep, err
	}
	rec, err := env.state().ReadCanary()
	if err != nil {
		return rep, err
	}
	if rec != nil {
		rep.Version = rec.Version
		switch err := env.store().Remove(rec.Version); {
		case err == nil:
			rep.ReleaseRemoved = true
		case errors.Is(err, release.ErrIsCurrent):
			rep.KeptReason = "it is the current release"
		case errors.Is(err, release.ErrNotFound):
			rep.KeptReason = "already removed"
		default:
			return rep, fmt.Errorf("remove release %s: %w", rec.Version, err)
		}
		if err := env.state().RemoveCanary(); err != nil {
			return rep, err
		}
	}
	err = env.state().Audit(state.Event{Action: "canary-stop", FromVersion: rep.Version, Outcome: state.OutcomeOK})
	return rep, err
}
