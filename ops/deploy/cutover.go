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
	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
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
type Report = outcome.Cutover

// Pruned lists the snapshots and releases a confirmed cutover removed.
type Pruned = outcome.Pruned

// prune keeps the newest install.keepReleases snapshots and releases, never
// a snapshot snapshot.Protect protects (the rule mcpctl snapshot prune
// follows too; this cutover's own snapshot is the newest), the releases in
// keepReleases (current and the previous one), nor the releases a pending
// marker still needs. A failure is reported, not fatal: the cutover is done.
func prune(env *Env, store *release.Store, keepReleases []string) *Pruned {
	dir, keep := env.Config.StateDir, env.Config.Install.KeepReleases
	if keep <= 0 {
		return nil
	}
	pendingSnap := ""
	if p, err := env.state().ReadPending(); err != nil {
		return &Pruned{Err: "pending marker unreadable, nothing pruned: " + err.Error()}
	} else if p != nil {
		pendingSnap = p.SnapshotID
		keepReleases = append(keepReleases, p.FromVersion, p.ToVersion)
	}
	out := &Pruned{}
	var errs []error
	var err error
	if protect, perr := snapshot.ReadProtected(dir, store, pendingSnap); perr != nil {
		errs = append(errs, fmt.Errorf("no snapshot pruned: %w", perr))
	} else if out.Snapshots, err = snapshot.Prune(dir, keep, snapshot.ProtectedIDs(protect)...); err != nil {
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
		_ = env.state().Audit(state.Event{Action: state.ActionSnapshotPrune, Outcome: state.OutcomeOK, Reason: "after cutover",
			Details: map[string]string{"snapshots": strings.Join(out.Snapshots, ","), "releases": strings.Join(out.Releases, ",")}})
	}
	return out
}

// Cutover runs mcpctl cutover: preflight, snapshot and arm the rollback,
// swap, verify, confirm. Nothing changes before the rollback is armed; a
// failure after it rolls back at once. The returned error is an *Error
// carrying the exit code.
func Cutover(ctx context.Context, env *Env, opts Options) (*Report, error) {
	c := &cutover{env: env, opts: opts, dir: env.state(), store: env.store(), start: env.now(), rep: &Report{}}
	if err := c.usage(); err != nil {
		return c.rep, err
	}
	release, err := env.lock(ctx, "cutover --build "+opts.Build, 0)
	if err != nil {
		return c.rep, &Error{Code: CodeFailed, Err: fmt.Errorf("cutover: %w", err)}
	}
	var once sync.Once
	c.unlock = func() { once.Do(func() { _ = release() }) }
	defer c.unlock()

	if err := c.timed("preflight", func() error { return c.preflight(ctx) }); err != nil {
		return c.rep, err
	}
	c.noteJobs(ctx)
	defer c.judgeJobs(ctx)
	if err := c.timed("snapshot+arm", func() error { return c.arm(ctx) }); err != nil {
		return c.rep, err
	}
	if why := c.swap(ctx); why != nil {
		return c.rollBack(ctx, why)
	}
	if why := c.verify(ctx); why != nil {
		return c.rollBack(ctx, why)
	}
	// Whichever slot starts next (boot, the socket) runs the new release.
	if err := c.env.settleSlots(c.facts.CandidateVersion); err != nil {
		c.rep.Warnings = append(c.rep.Warnings, "slot links: "+err.Error())
	}
	// The old slot is parked until here, able to take over again at once:
	// a rollback from now (the timer, if mcpctl dies) resumes it.
	c.env.pause(ctx, PauseParked)
	if err := c.timed("disarm", func() error { return c.confirm(ctx) }); err != nil {
		return c.rep, err
	}
	if tk := c.rep.Takeover; tk != nil && len(tk.Parked) > 0 {
		warns, err := c.env.stopParked(context.WithoutCancel(ctx), tk.Parked)
		c.rep.Warnings = append(c.rep.Warnings, warns...)
		if err != nil {
			c.rep.Warnings = append(c.rep.Warnings, err.Error())
		}
	}
	return c.done(), nil
}

// cutover is one run of Cutover: what each step learned for the next.
type cutover struct {
	env    *Env
	opts   Options
	dir    state.Dir
	store  *release.Store
	start  time.Time
	rep    *Report
	unlock func()

	facts Facts     // preflight's observations
	jobs  []JobUnit // the jobs running before the swap
	self  string    // the mcpctl the armed timer runs
	snap  string    // the snapshot the rollback restores
	nonce string    // the pending marker's
}

// audit records an event of this cutover (best effort: the report and the
// exit code carry the outcome).
func (c *cutover) audit(action, outcome, reason string, details map[string]string) {
	_ = c.dir.Audit(state.Event{Action: action, FromVersion: c.facts.CurrentVersion, ToVersion: c.facts.CandidateVersion,
		SnapshotID: c.snap, Outcome: outcome, Reason: reason, Details: details})
}

// timed runs one step and records how long it took.
func (c *cutover) timed(name string, step func() error) error {
	t0 := c.env.now()
	err := step()
	c.rep.Timings = append(c.rep.Timings, Timing{Step: name, Duration: millis.Duration(c.env.now().Sub(t0))})
	return err
}

// Validate checks the flags on their own (a usage error, exit 2); a zero
// (or negative) Deadline is rollback.deadline of the config, checked by
// Cutover.
func (o Options) Validate() error {
	if !o.ArmRollback {
		return fail(CodeUsage, "%s", PlanPreflight(Facts{}).Usage)
	}
	if o.Deadline > 0 && o.Deadline < 10*time.Second {
		return fail(CodeUsage, "--deadline %s: must be at least 10s (verification needs the time)", o.Deadline)
	}
	return nil
}

// usage checks the flags before anything is read.
func (c *cutover) usage() error {
	if c.opts.Deadline <= 0 {
		c.opts.Deadline = c.env.Config.Rollback.Deadline.D()
	}
	if c.opts.Deadline < 10*time.Second {
		return fail(CodeUsage, "--deadline %s: must be at least 10s (verification needs the time)", c.opts.Deadline)
	}
	return c.opts.Validate()
}

// preflight observes the candidate and production and refuses before
// anything changes.
func (c *cutover) preflight(ctx context.Context) error {
	env, cfg, f := c.env, c.env.Config, &c.facts
	*f = Facts{ArmRollback: true, SkipCanaryReason: c.opts.SkipCanaryReason}
	f.CandidateVersion, f.Digest, f.CandidateErr = checkCandidate(ctx, c.opts.Build, c.opts.Version, cfg.Backend.Config)
	if errors.Is(f.CandidateErr, ErrVersionName) {
		return &Error{Code: CodeUsage, Err: f.CandidateErr}
	}
	if f.CandidateErr == nil {
		// A release already installed under this name must be this build.
		switch rel, err := c.store.Get(f.CandidateVersion); {
		case err == nil:
			f.ReleaseDigest = rel.Digest
		case !errors.Is(err, release.ErrNotFound):
			f.CandidateErr = fmt.Errorf("release %s: %w", f.CandidateVersion, err)
		}
	}
	if f.CandidateErr == nil {
		var err error
		if f.CanaryOK, f.StressOK, err = c.dir.PassingFor(f.Digest); err != nil {
			f.CandidateErr = fmt.Errorf("read verdicts: %w", err)
		}
	}
	var err error
	if f.CurrentVersion, err = c.store.Current(); err != nil {
		f.CandidateErr = errors.Join(f.CandidateErr, fmt.Errorf("current release: %w", err))
	}
	if st, err := env.Systemd.Unit(ctx, env.ProductionUnit(ctx)); err != nil {
		f.BackendActive = "unknown: " + err.Error()
	} else {
		f.BackendActive = st.ActiveState
		f.Socket = env.socketFact(ctx, env.socketUnit())
		var own []int
		if st.MainPID > 0 {
			own = append(own, int(st.MainPID))
		}
		if facts, err := env.slotFacts(ctx); err == nil {
			for _, sf := range facts {
				if sf.MainPID > 0 {
					own = append(own, int(sf.MainPID))
				}
			}
		}
		f.Duplicates = duplicates(cfg.Backend.Listen, own, f.Socket.Active())
	}
	sup := env.supervision(ctx)
	f.Supervision = &sup
	f.HealthzErr = env.verifier().OK(ctx, env.backendURL(), "/healthz")
	f.ReadyzErr = env.verifier().OK(ctx, env.backendURL(), "/readyz")
	f.Tunnels = env.tunnelFacts(ctx, false)
	if f.Pending, err = c.dir.ReadPending(); err != nil {
		f.Pending = &state.Pending{SnapshotID: "unreadable: " + err.Error()}
	}
	c.rep.FromVersion, c.rep.ToVersion, c.rep.Digest = f.CurrentVersion, f.CandidateVersion, f.Digest
	pre := PlanPreflight(*f)
	c.rep.Warnings, c.rep.Refusals = pre.Warnings, pre.Refusals
	if !pre.OK() {
		env.log().Warn("cutover refused", "refusals", pre.Refusals)
		c.audit(state.ActionCutover, state.OutcomeRefused, strings.Join(pre.Refusals, "; "), nil)
		return fail(CodeFailed, "cutover refused, nothing changed:\n  - %s", strings.Join(pre.Refusals, "\n  - "))
	}
	for _, w := range pre.Warnings {
		env.log().Warn("cutover", "warning", w)
	}
	// The armed timer must find the mcpctl it runs even if this one was a
	// temporary build (`go run`) that is gone by the deadline.
	if c.self, err = stableSelf(env.MCPCtl, string(c.dir)); err != nil {
		return fail(CodeFailed, "cutover refused, nothing changed: %w", err)
	}
	return nil
}

// SnapshotSpec is what a snapshot of production covers, from the config:
// the one a cutover takes and `mcpctl snapshot create`'s.
func SnapshotSpec(cfg *ctlconfig.Config, reason string) snapshot.Spec {
	return snapshot.Spec{
		StateDir:      cfg.StateDir,
		InstallRoot:   cfg.Install.Root,
		BackendConfig: cfg.Backend.Config,
		UnitDir:       cfg.UnitDir,
		Unit:          cfg.Backend.Unit,
		Socket:        units.Socket(cfg.Backend.Unit),
		Reason:        reason,
	}
}

// arm takes the snapshot, writes the pending marker and arms the rollback
// timer; a failure leaves production as it was.
func (c *cutover) arm(ctx context.Context) error {
	env, cfg, f := c.env, c.env.Config, c.facts
	m, err := snapshot.Create(ctx, SnapshotSpec(cfg, "cutover to "+f.CandidateVersion))
	if err != nil {
		return fail(CodeFailed, "snapshot, nothing changed: %w", err)
	}
	c.snap, c.rep.SnapshotID = m.ID, m.ID
	_ = c.dir.Audit(state.Event{Action: state.ActionSnapshot, FromVersion: f.CurrentVersion, SnapshotID: m.ID, Outcome: state.OutcomeOK, Reason: "before cutover to " + f.CandidateVersion})
	if c.nonce, err = state.NewNonce(); err != nil {
		return fail(CodeFailed, "nonce: %w", err)
	}
	now := env.now()
	pending := &state.Pending{SnapshotID: m.ID, Nonce: c.nonce, FromVersion: f.CurrentVersion, ToVersion: f.CandidateVersion,
		ArmedAt: now, Deadline: now.Add(c.opts.Deadline), TimerUnit: RollbackTimer, ServiceUnit: RollbackService}
	if err := c.dir.WritePending(pending); err != nil {
		return fail(CodeFailed, "write pending marker, nothing changed: %w", err)
	}
	// A leftover from an earlier run would make arming fail.
	if err := disarm(ctx, env); err != nil {
		_ = c.dir.ClearPendingIf(c.nonce)
		return fail(CodeFailed, "clear a leftover rollback timer, nothing changed: %w", err)
	}
	if err := env.Systemd.ArmTransient(ctx, unitstate.Transient{Timer: RollbackTimer, Service: RollbackService,
		Description: "mcpctl automatic rollback of the cutover to " + f.CandidateVersion,
		Argv:        env.rollbackArgv(c.self, m.ID, c.nonce), After: c.opts.Deadline}); err != nil {
		_ = c.dir.ClearPendingIf(c.nonce)
		return fail(CodeFailed, "arm the rollback timer, nothing changed: %w", err)
	}
	env.log().Info("rollback armed", "snapshot", m.ID, "deadline", c.opts.Deadline, "timer", RollbackTimer)
	c.audit(state.ActionArmed, state.OutcomeOK, "", map[string]string{"deadline": pending.Deadline.UTC().Format(time.RFC3339)})
	return nil
}

// budget bounds the restart and the verification, each well inside the
// deadline, so that this run, not the timer, decides.
func (c *cutover) budget() time.Duration { return c.opts.Deadline / 3 }

// swap installs the release, points current at it, writes the units when
// they changed, reloads, and starts the release in the idle production
// slot beside the serving one (applySlots): the serving one is touched only
// once the new one is verified on its own listener. The socket and the
// tunnels are never restarted. It returns why it failed.
func (c *cutover) swap(ctx context.Context) (why []string) {
	env, v := c.env, c.facts.CandidateVersion
	_ = c.timed("install+restart", func() error {
		if _, _, err := c.store.Install(v, c.opts.Build); err != nil {
			why = []string{"install release: " + err.Error()}
		} else if err := c.store.SetCurrent(v); err != nil {
			why = []string{"swap current: " + err.Error()}
		} else if err := writeUnitIfChanged(env); err != nil {
			why = []string{"unit: " + err.Error()}
		} else if err := env.Systemd.DaemonReload(ctx); err != nil {
			why = []string{"daemon-reload: " + err.Error()}
		} else {
			var facts []SlotFact
			var err error
			if facts, err = env.slotFacts(ctx); err != nil {
				why = []string{err.Error()}
				return nil
			}
			plan := PlanSlots(env.Config.Backend.Unit, facts, v)
			env.log().Info("slot plan", "start", plan.StartUnit, "standby", plan.Standby, "keep", plan.Keep, "legacy", plan.Legacy)
			c.rep.Takeover, why = env.applySlots(ctx, plan, v, c.facts.Digest, c.budget(), true)
		}
		return nil
	})
	if c.rep.Takeover != nil {
		c.rep.Warnings = append(c.rep.Warnings, c.rep.Takeover.Warnings...)
	}
	if why == nil {
		env.log().Info("backend took over", "version", v, "unit", c.rep.Takeover.Unit, "from", c.rep.Takeover.From)
	}
	return why
}

// verify probes production until it passes, retrying briefly (the backend
// may need a moment), within the budget. It returns the failures.
func (c *cutover) verify(ctx context.Context) (why []string) {
	want := Expect{Version: c.facts.CandidateVersion, Digest: c.facts.Digest, Socket: c.facts.Socket}
	_ = c.timed("verify", func() error {
		vctx, cancel := context.WithTimeout(ctx, c.budget())
		defer cancel()
		for {
			got := Judge(want, c.facts.Tunnels, observe(vctx, c.env))
			if vctx.Err() != nil && why != nil {
				// The budget ended inside this round: its probes timed out for
				// that reason alone. The previous complete round is the verdict.
				return nil
			}
			why = got
			if len(why) == 0 || vctx.Err() != nil {
				return nil
			}
			select {
			case <-vctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	if len(why) > 0 {
		return why
	}
	c.env.log().Info("cutover verified", "version", c.facts.CandidateVersion)
	c.audit(state.ActionVerified, state.OutcomeOK, "", nil)
	return nil
}

// rollBack restores the snapshot at once after a failed swap or verify.
func (c *cutover) rollBack(ctx context.Context, why []string) (*Report, error) {
	rep, f := c.rep, c.facts
	rep.Failures = why
	c.env.log().Error("cutover failed verification, rolling back", "failures", why)
	c.audit(state.ActionCutover, state.OutcomeFailed, strings.Join(why, "; "), nil)
	var rb *RollbackReport
	err := c.timed("rollback", func() error {
		var err error
		rb, err = restore(context.WithoutCancel(ctx), c.env, RollbackPlan{Act: true, SnapshotID: c.snap, Nonce: c.nonce, Reason: "cutover failed verification"}, false)
		return err
	})
	rep.Rollback, rep.Duration = rb, millis.Duration(c.env.now().Sub(c.start))
	if err != nil {
		return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("cutover failed (%s) and the rollback failed: %w", strings.Join(why, "; "), err)}
	}
	rep.RolledBack = true
	return rep, fail(CodeRolledBack, "cutover to %s failed verification and was rolled back to %s:\n  - %s", f.CandidateVersion, f.CurrentVersion, strings.Join(why, "\n  - "))
}

// confirm disarms the rollback and clears the pending marker (see
// confirmArmed for a timer that fired at the deadline).
func (c *cutover) confirm(ctx context.Context) error {
	fired, warn, err := confirm(ctx, c.env, c.nonce, c.unlock)
	if err != nil {
		return fail(CodeFailed, "verified %s, but %w", c.facts.CandidateVersion, err)
	}
	c.rep.FiredAtDeadline = fired
	if warn != "" {
		c.rep.Warnings = append(c.rep.Warnings, warn)
	}
	if fired {
		c.env.log().Warn("rollback timer fired at the deadline after verification; its run is a no-op", "version", c.facts.CandidateVersion)
	}
	return nil
}

// done prunes beyond install.keepReleases and records the cutover.
func (c *cutover) done() *Report {
	rep, f := c.rep, c.facts
	if !rep.FiredAtDeadline {
		// Pruning needs the lock, which the fired rollback may hold now.
		rep.Pruned = prune(c.env, c.store, []string{f.CandidateVersion, f.CurrentVersion})
	}
	rep.Duration = millis.Duration(c.env.now().Sub(c.start))
	c.env.log().Info("rollback disarmed; cutover done", "version", f.CandidateVersion, "duration", rep.Duration.D())
	_ = c.dir.Audit(state.Event{Action: state.ActionDisarmed, ToVersion: f.CandidateVersion, SnapshotID: c.snap, Outcome: state.OutcomeOK})
	c.audit(state.ActionCutover, state.OutcomeOK, "", map[string]string{"duration": rep.Duration.String()})
	return rep
}

// observe probes production after the restart.
func observe(ctx context.Context, env *Env) Observed {
	o := observeBackend(ctx, env)
	o.Tunnels = env.tunnelFacts(ctx, true)
	o.Socket = env.socketFact(ctx, env.socketUnit())
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

// writeUnitIfChanged renders production's units (the socket, the slot
// template and slice, the boot-time check and the watchdog service) and
// writes each that differs (atomically, as install and canary do). A
// written socket unit applies at its next start, never by restarting it.
// Without tunnel commands in the config the units cannot be rendered; the
// installed units are then kept as they are.
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
	prod := map[string]bool{env.socketUnit(): true, units.SlotTemplate(cfg.Backend.Unit): true,
		units.BackendSlice(cfg.Backend.Unit): true, units.PendingRollbackService: true, units.WatchdogService: true}
	var write []units.Unit
	for _, u := range us {
		if prod[u.Name] {
			write = append(write, u)
		}
	}
	written, err := units.Sync(cfg.UnitDir, write)
	if err != nil {
		return err
	}
	for _, w := range written {
		if w == units.SlotTemplate(cfg.Backend.Unit) {
			// The boot slot starts at boot from now on (its template's
			// DefaultInstance); the legacy unit is disabled once it handed
			// off.
			return enableAfterReload(env, w)
		}
	}
	return nil
}

// enableAfterReload reloads systemd so it knows unit, then enables it.
func enableAfterReload(env *Env, unit string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.Systemd.DaemonReload(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	if err := env.Systemd.Enable(ctx, unit); err != nil {
		return fmt.Errorf("enable %s: %w", unit, err)
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
		o.Socket = env.socketFact(ctx, env.socketUnit())
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
	switch err := env.Systemd.DisarmTransient(ctx, RollbackTimer, RollbackService); {
	case errors.Is(err, unitstate.ErrAlreadyFired):
		if err := env.state().ClearPendingIf(nonce); err != nil {
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
	if err := env.state().ClearPendingIf(nonce); err != nil {
		return false, "", fmt.Errorf("disarmed, but the pending marker could not be cleared (%w): the next boot would roll back; run `mcpctl rollback disarm`", err)
	}
	return false, "", nil
}
