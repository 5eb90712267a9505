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
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/unitstate"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/units"
)

// Options are the flags of mcpctl cutover.
type Options struct {
	Build            string
	Version          string // "" means the candidate's own --version
	Deadline         time.Duration
	ArmRollback      bool
	SkipCanaryReason string
}

// Report says what a cutover did.
type Report struct {
	FromVersion string   `json:"fromVersion"`
	ToVersion   string   `json:"toVersion"`
	Digest      string   `json:"digest,omitempty"`
	SnapshotID  string   `json:"snapshotId,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
	Refusals    []string `json:"refusals,omitempty"`
	Failures    []string `json:"failures,omitempty"`
	RolledBack  bool     `json:"rolledBack"`
	// FiredAtDeadline: verified, but the armed timer had fired; its run was
	// made a no-op (marker cleared under the lock) and the cutover stands.
	FiredAtDeadline bool            `json:"firedAtDeadline,omitempty"`
	Rollback        *RollbackReport `json:"rollback,omitempty"`
	Duration        time.Duration   `json:"duration"`
	Timings         []Timing        `json:"timings"`
	// Pruned is what the confirmed cutover pruned beyond install.keepReleases.
	Pruned *Pruned `json:"pruned,omitempty"`
}

// Pruned lists the snapshots and releases a confirmed cutover removed.
type Pruned struct {
	Snapshots []string `json:"snapshots,omitempty"`
	Releases  []string `json:"releases,omitempty"`
	Err       string   `json:"error,omitempty"`
}

// prune keeps the newest install.keepReleases snapshots and releases, never
// the snapshots in keepSnaps (the rollback target), the releases in
// keepReleases (current and the previous one), nor what a pending marker
// still needs. A failure is reported, not fatal: the cutover is done.
func prune(env *Env, store *release.Store, keepSnaps, keepReleases []string) *Pruned {
	dir, keep := env.Config.StateDir, env.Config.Install.KeepReleases
	if keep <= 0 {
		return nil
	}
	if p, err := state.Dir(dir).ReadPending(); err != nil {
		return &Pruned{Err: "pending marker unreadable, nothing pruned: " + err.Error()}
	} else if p != nil {
		keepSnaps = append(keepSnaps, p.SnapshotID)
		keepReleases = append(keepReleases, p.FromVersion, p.ToVersion)
	}
	out := &Pruned{}
	var errs []error
	var err error
	if out.Snapshots, err = snapshot.Prune(dir, keep, keepSnaps...); err != nil {
		errs = append(errs, err)
	}
	if out.Releases, err = store.Prune(keep, keepReleases...); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		out.Err = err.Error()
		env.log().Warn("prune after cutover", "err", err)
	}
	if len(out.Snapshots)+len(out.Releases) > 0 {
		_ = state.Dir(dir).Audit(state.Event{Action: state.ActionSnapshotPrune, Outcome: state.OutcomeOK, Reason: "after cutover",
			Details: map[string]string{"snapshots": strings.Join(out.Snapshots, ","), "releases": strings.Join(out.Releases, ",")}})
	}
	return out
}

// Cutover runs mcpctl cutover (issue 6 steps 1-5). The returned error is an
// *Error carrying the exit code.
func Cutover(ctx context.Context, env *Env, opts Options) (*Report, error) {
	start := env.now()
	rep := &Report{}
	step := func(name string, t0 time.Time) { rep.Timings = append(rep.Timings, Timing{name, env.now().Sub(t0)}) }
	log := env.log()
	cfg := env.Config
	dir := cfg.StateDir
	if !opts.ArmRollback {
		return rep, fail(CodeUsage, "%s", PlanPreflight(Facts{}).Usage)
	}
	if opts.Deadline <= 0 {
		opts.Deadline = cfg.Rollback.Deadline.D()
	}
	if opts.Deadline < 10*time.Second {
		return rep, fail(CodeUsage, "--deadline %s: must be at least 10s (verification needs the time)", opts.Deadline)
	}

	// 1. Preflight, before anything changes.
	t0 := env.now()
	release1, err := state.Dir(dir).Lock("cutover --build " + opts.Build)
	if err != nil {
		return rep, &Error{Code: CodeFailed, Err: fmt.Errorf("cutover: %w", err)}
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = release1() }) }
	defer unlock()
	store := &release.Store{Root: cfg.Install.Root}
	f := Facts{ArmRollback: true, SkipCanaryReason: opts.SkipCanaryReason}
	f.CandidateVersion, f.Digest, f.CandidateErr = checkCandidate(ctx, opts.Build, opts.Version, cfg.Backend.Config)
	if errors.Is(f.CandidateErr, ErrVersionName) {
		return rep, &Error{Code: CodeUsage, Err: f.CandidateErr}
	}
	if f.CandidateErr == nil {
		// A release already installed under this name must be this build.
		switch rel, err := store.Get(f.CandidateVersion); {
		case err == nil:
			f.ReleaseDigest = rel.Digest
		case !errors.Is(err, release.ErrNotFound):
			f.CandidateErr = fmt.Errorf("release %s: %w", f.CandidateVersion, err)
		}
	}
	if f.CandidateErr == nil {
		f.CanaryOK, f.StressOK, err = state.Dir(dir).PassingFor(f.Digest)
		if err != nil {
			f.CandidateErr = fmt.Errorf("read verdicts: %w", err)
		}
	}
	f.CurrentVersion, err = store.Current()
	if err != nil {
		f.CandidateErr = errors.Join(f.CandidateErr, fmt.Errorf("current release: %w", err))
	}
	if st, err := env.Systemd.Unit(ctx, cfg.Backend.Unit); err != nil {
		f.BackendActive = "unknown: " + err.Error()
	} else {
		f.BackendActive = st.ActiveState
		f.Duplicates = duplicates(cfg.Backend.Listen, int(st.MainPID))
	}
	sup := env.supervision(ctx)
	f.Supervision = &sup
	f.HealthzErr = env.verifier().OK(ctx, env.backendURL(), "/healthz")
	f.ReadyzErr = env.verifier().OK(ctx, env.backendURL(), "/readyz")
	f.Tunnels = env.tunnelFacts(ctx, false)
	if f.Pending, err = state.Dir(dir).ReadPending(); err != nil {
		f.Pending = &state.Pending{SnapshotID: "unreadable: " + err.Error()}
	}
	rep.FromVersion, rep.ToVersion, rep.Digest = f.CurrentVersion, f.CandidateVersion, f.Digest
	pre := PlanPreflight(f)
	rep.Warnings, rep.Refusals = pre.Warnings, pre.Refusals
	step("preflight", t0)
	if !pre.OK() {
		log.Warn("cutover refused", "refusals", pre.Refusals)
		_ = state.Dir(dir).Audit(state.Event{Action: state.ActionCutover, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion, Outcome: state.OutcomeRefused, Reason: strings.Join(pre.Refusals, "; ")})
		return rep, fail(CodeFailed, "cutover refused, nothing changed:\n  - %s", strings.Join(pre.Refusals, "\n  - "))
	}
	for _, w := range pre.Warnings {
		log.Warn("cutover", "warning", w)
	}
	// The armed timer must find the mcpctl it runs even if this one was a
	// temporary build (`go run`) that is gone by the deadline.
	self, err := stableSelf(env.MCPCtl, dir)
	if err != nil {
		return rep, fail(CodeFailed, "cutover refused, nothing changed: %w", err)
	}

	// 2. Snapshot, marker, armed rollback.
	t0 = env.now()
	m, err := snapshot.Create(ctx, snapshot.Spec{StateDir: dir, InstallRoot: cfg.Install.Root, BackendConfig: cfg.Backend.Config,
		UnitDir: cfg.UnitDir, Unit: cfg.Backend.Unit, Reason: "cutover to " + f.CandidateVersion})
	if err != nil {
		return rep, fail(CodeFailed, "snapshot, nothing changed: %w", err)
	}
	rep.SnapshotID = m.ID
	_ = state.Dir(dir).Audit(state.Event{Action: state.ActionSnapshot, FromVersion: f.CurrentVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK, Reason: "before cutover to " + f.CandidateVersion})
	nonce, err := state.NewNonce()
	if err != nil {
		return rep, fail(CodeFailed, "nonce: %w", err)
	}
	now := env.now()
	pending := &state.Pending{SnapshotID: m.ID, Nonce: nonce, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion,
		ArmedAt: now, Deadline: now.Add(opts.Deadline), TimerUnit: RollbackTimer, ServiceUnit: RollbackService}
	if err := state.Dir(dir).WritePending(pending); err != nil {
		return rep, fail(CodeFailed, "write pending marker, nothing changed: %w", err)
	}
	// A leftover from an earlier run would make arming fail.
	if err := disarm(ctx, env); err != nil {
		_ = state.Dir(dir).ClearPendingIf(nonce)
		return rep, fail(CodeFailed, "clear a leftover rollback timer, nothing changed: %w", err)
	}
	if err := env.Systemd.ArmTransient(ctx, unitstate.Transient{Timer: RollbackTimer, Service: RollbackService,
		Description: "mcpctl automatic rollback of the cutover to " + f.CandidateVersion,
		Argv:        env.rollbackArgv(self, m.ID, nonce), After: opts.Deadline}); err != nil {
		_ = state.Dir(dir).ClearPendingIf(nonce)
		return rep, fail(CodeFailed, "arm the rollback timer, nothing changed: %w", err)
	}
	log.Info("rollback armed", "snapshot", m.ID, "deadline", opts.Deadline, "timer", RollbackTimer)
	_ = state.Dir(dir).Audit(state.Event{Action: state.ActionArmed, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK,
		Details: map[string]string{"deadline": pending.Deadline.UTC().Format(time.RFC3339)}})
	step("snapshot+arm", t0)

	rollbackNow := func(why []string) (*Report, error) {
		rep.Failures = why
		log.Error("cutover failed verification, rolling back", "failures", why)
		_ = state.Dir(dir).Audit(state.Event{Action: state.ActionCutover, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion, SnapshotID: m.ID, Outcome: state.OutcomeFailed, Reason: strings.Join(why, "; ")})
		t0 := env.now()
		rb, err := restore(context.WithoutCancel(ctx), env, RollbackPlan{Act: true, SnapshotID: m.ID, Nonce: nonce, Reason: "cutover failed verification"}, false)
		step("rollback", t0)
		rep.Rollback, rep.Duration = rb, env.now().Sub(start)
		if err != nil {
			return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("cutover failed (%s) and the rollback failed: %w", strings.Join(why, "; "), err)}
		}
		rep.RolledBack = true
		return rep, fail(CodeRolledBack, "cutover to %s failed verification and was rolled back to %s:\n  - %s", f.CandidateVersion, f.CurrentVersion, strings.Join(why, "\n  - "))
	}

	// 3. Install, swap, reload, restart only the backend. Every step is
	// bounded well inside the deadline so this run, not the timer, decides.
	t0 = env.now()
	budget := opts.Deadline / 3
	if _, _, err := store.Install(f.CandidateVersion, opts.Build); err != nil {
		return rollbackNow([]string{"install release: " + err.Error()})
	}
	if err := store.SetCurrent(f.CandidateVersion); err != nil {
		return rollbackNow([]string{"swap current: " + err.Error()})
	}
	if err := writeUnitIfChanged(env); err != nil {
		return rollbackNow([]string{"unit: " + err.Error()})
	}
	if err := env.Systemd.DaemonReload(ctx); err != nil {
		return rollbackNow([]string{"daemon-reload: " + err.Error()})
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	err = env.Systemd.Restart(rctx, cfg.Backend.Unit)
	cancel()
	step("install+restart", t0)
	if err != nil {
		return rollbackNow([]string{err.Error()}) // the client names the job and the unit
	}
	log.Info("backend restarted", "version", f.CandidateVersion)

	// 4. Verify, retrying briefly: the backend may need a moment.
	t0 = env.now()
	want := Expect{Version: f.CandidateVersion, Digest: f.Digest}
	var why []string
	vctx, cancel := context.WithTimeout(ctx, budget)
	for {
		got := Judge(want, f.Tunnels, observe(vctx, env))
		if vctx.Err() != nil && why != nil {
			// The budget ended inside this round: its probes timed out for
			// that reason alone. The previous complete round is the verdict.
			break
		}
		why = got
		if len(why) == 0 || vctx.Err() != nil {
			break
		}
		select {
		case <-vctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	cancel()
	step("verify", t0)
	if len(why) > 0 {
		return rollbackNow(why)
	}
	log.Info("cutover verified", "version", f.CandidateVersion)
	_ = state.Dir(dir).Audit(state.Event{Action: state.ActionVerified, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK})

	// 5. Disarm and confirm.
	t0 = env.now()
	fired, warn, err := confirm(ctx, env, nonce, unlock)
	if err != nil {
		return rep, fail(CodeFailed, "verified %s, but %w", f.CandidateVersion, err)
	}
	rep.FiredAtDeadline = fired
	if warn != "" {
		rep.Warnings = append(rep.Warnings, warn)
	}
	if fired {
		log.Warn("rollback timer fired at the deadline after verification; its run is a no-op", "version", f.CandidateVersion)
	}
	step("disarm", t0)
	if !rep.FiredAtDeadline {
		// Pruning needs the lock, which the fired rollback may hold now.
		rep.Pruned = prune(env, store, []string{m.ID}, []string{f.CandidateVersion, f.CurrentVersion})
	}
	rep.Duration = env.now().Sub(start)
	log.Info("rollback disarmed; cutover done", "version", f.CandidateVersion, "duration", rep.Duration)
	_ = state.Dir(dir).Audit(state.Event{Action: state.ActionDisarmed, ToVersion: f.CandidateVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK})
	_ = state.Dir(dir).Audit(state.Event{Action: state.ActionCutover, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK,
		Details: map[string]string{"duration": rep.Duration.String()}})
	return rep, nil
}

// observe probes production after the restart.
func observe(ctx context.Context, env *Env) Observed {
	o := observeBackend(ctx, env)
	o.Tunnels = env.tunnelFacts(ctx, true)
	return o
}

// observeBackend runs verify's backend checks (health, readiness,
// system.info, shell.exec, file.list) against production.
func observeBackend(ctx context.Context, env *Env) Observed {
	r := env.verifier().Backend(ctx, env.backendURL(), verify.Expect{})
	return Observed{
		Version: r.Version, Digest: r.Build,
		InfoErr:     checkErr(r, verify.CheckSystemInfo),
		HealthzErr:  checkErr(r, verify.CheckHealthz),
		ReadyzErr:   checkErr(r, verify.CheckReadyz),
		ShellErr:    checkErr(r, verify.CheckShellExec),
		FileListErr: checkErr(r, verify.CheckFileList),
	}
}

// checkCandidate runs the canary's checks on a build (ops/candidate) and
// settles its version: --version when given, else what the build reports.
func checkCandidate(ctx context.Context, build, version, backendConfig string) (string, string, error) {
	res, err := candidate.Check(ctx, build, candidate.Options{Config: backendConfig})
	if err != nil {
		return version, "", err
	}
	if err := checkVersion(res, version); err != nil {
		return "", "", err
	}
	return res.Version, res.Digest, nil
}

// writeUnitIfChanged renders the backend unit and writes it when it differs
// (atomically, as install and canary do). Without tunnel commands in
// the config the units cannot be rendered; the installed unit is then kept as
// it is.
func writeUnitIfChanged(env *Env) error {
	cfg := env.Config
	if cfg.ValidateTunnels() != nil {
		return nil
	}
	spec, err := cfg.UnitSpec()
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	us, err := units.Render(units.Params{Spec: spec, MCPCtl: env.MCPCtl, MCPCtlConfig: env.MCPCtlConfig})
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	for _, u := range us {
		if u.Name == cfg.Backend.Unit {
			_, err := units.Sync(cfg.UnitDir, []units.Unit{u})
			return err
		}
	}
	return nil
}

// Check verifies production as it runs now (mcpctl verify): the backend's
// health, readiness, system.info and shell.exec, and/or each tunnel's unit,
// /readyz and shell.exec through it. It returns every failure.
func Check(ctx context.Context, env *Env, backend, tunnels bool) []string {
	var o Observed
	var before []TunnelFact
	want := Expect{}
	if backend {
		o = observeBackend(ctx, env)
		want.Version = o.Version
	}
	if tunnels {
		o.Tunnels = env.tunnelFacts(ctx, true)
		before = o.Tunnels
	}
	return Judge(want, before, o)
}

// SelfPath is where a cutover keeps the mcpctl its armed timer runs, under
// the state directory.
const SelfPath = "bin/mcpctl"

// stableSelf copies the running mcpctl (self) to <stateDir>/bin/mcpctl,
// atomically and executable, and returns that path.
func stableSelf(self, stateDir string) (string, error) {
	if !filepath.IsAbs(self) {
		return "", fmt.Errorf("mcpctl path %q: must be absolute for the armed timer", self)
	}
	dst := filepath.Join(stateDir, SelfPath)
	if filepath.Clean(self) == dst {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("keep mcpctl for the armed timer: %w", err)
	}
	if _, err := atomicfs.CopyFile(dst, self, 0o755, nil); err != nil {
		return "", fmt.Errorf("keep mcpctl for the armed timer: %w", err)
	}
	return dst, nil
}

// confirm disarms the rollback timer after a verified cutover and clears the
// pending marker. When the timer already fired (verification passed right at
// the deadline), its run is still waiting for our lock: clearing the marker
// first makes that run a stale-nonce no-op, so the verified build stays;
// unlock then lets it finish, and fired is true. The caller must not need
// the lock after a fired confirm.
func confirm(ctx context.Context, env *Env, nonce string, unlock func()) (fired bool, warning string, err error) {
	dir := env.Config.StateDir
	switch err := env.Systemd.DisarmTransient(ctx, RollbackTimer, RollbackService); {
	case errors.Is(err, unitstate.ErrAlreadyFired):
		if err := state.Dir(dir).ClearPendingIf(nonce); err != nil {
			return false, "", fmt.Errorf("the rollback timer fired at the deadline and the pending marker could not be cleared (%w): the fired rollback will restore the snapshot", err)
		}
		unlock()
		if err := env.Systemd.WaitGone(ctx, RollbackTimer, RollbackService); err != nil {
			warning = fmt.Sprintf("the rollback timer fired at the deadline; its run finds the cutover confirmed and does nothing, but it is still loaded: %v", err)
		}
		return true, warning, nil
	case err != nil:
		return false, "", fmt.Errorf("the rollback timer could not be disarmed (%w): it will roll back at the deadline; run `mcpctl rollback status`", err)
	}
	if gone, err := env.Systemd.Gone(ctx, RollbackTimer, RollbackService); err != nil || !gone {
		return false, "", fmt.Errorf("the rollback timer is still loaded (err %v): run `mcpctl rollback status` and `mcpctl rollback disarm`", err)
	}
	if err := state.Dir(dir).ClearPendingIf(nonce); err != nil {
		return false, "", fmt.Errorf("disarmed, but the pending marker could not be cleared (%w): the next boot would roll back; run `mcpctl rollback disarm`", err)
	}
	return false, "", nil
}
