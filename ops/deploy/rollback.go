package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// RollbackOptions are the flags of mcpctl rollback.
type RollbackOptions struct {
	SnapshotID string
	Nonce      string
	IfPending  bool
	// Boot: run by the boot-time unit, ordered before the backend, so the
	// restore must not start the backend (it would wait on this very run).
	// Only then is the start skipped; anyone else gets a restart and a check.
	Boot bool
	// LockWait is the least time to wait for the lock, beyond Env.LockWait
	// (the timer may fire while a cutover still runs; that cutover finishes
	// or rolls back itself first).
	LockWait time.Duration
}

// RollbackReport says what a rollback did.
type RollbackReport = outcome.Rollback

// Rollback runs mcpctl rollback: takes the lock, plans, restores.
func Rollback(ctx context.Context, env *Env, opts RollbackOptions) (*RollbackReport, error) {
	dir := env.Config.StateDir
	release, err := env.lock(ctx, "rollback", opts.LockWait)
	if err != nil {
		return nil, &Error{Code: CodeFailed, Err: fmt.Errorf("rollback: %w", err)}
	}
	defer release()
	pending, err := env.state().ReadPending()
	if err != nil {
		return nil, fail(CodeRollbackFailed, "rollback: read pending marker: %w", err)
	}
	facts := RollbackFacts{SnapshotID: opts.SnapshotID, Nonce: opts.Nonce, IfPending: opts.IfPending, Pending: pending}
	if opts.SnapshotID == "" && pending == nil {
		if list, err := snapshot.List(dir); err == nil && len(list) > 0 {
			facts.Newest = list[0].ID
		}
	}
	plan := PlanRollback(facts)
	env.log().Info("rollback plan", "act", plan.Act, "snapshot", plan.SnapshotID, "reason", plan.Reason)
	if !plan.Act {
		// A no-op is a success only while production runs: asked to
		// restore something with production down, say so. The boot-time
		// check runs before the backend starts and the armed timer's stale
		// nonce guards nothing: their no-ops stay what they are.
		if !opts.IfPending && opts.Nonce == "" {
			o, err := ObserveOutage(ctx, env.Systemd, env.Config.Backend.Unit)
			if err != nil {
				env.log().Warn("rollback: read production's units", "err", err)
			}
			if derr := DownError(o, plan.Reason); derr != nil {
				_ = env.state().Audit(state.Event{Action: state.ActionRolledBack, Outcome: state.OutcomeRefused, Reason: derr.Error(), SnapshotID: opts.SnapshotID})
				return &RollbackReport{Noop: true, Reason: plan.Reason, SnapshotID: opts.SnapshotID}, derr
			}
		}
		_ = env.state().Audit(state.Event{Action: state.ActionRolledBack, Outcome: state.OutcomeNoop, Reason: plan.Reason, SnapshotID: opts.SnapshotID})
		return &RollbackReport{OK: true, Noop: true, Reason: plan.Reason, SnapshotID: opts.SnapshotID}, nil
	}
	return restore(ctx, env, plan, opts.Boot)
}

// restore applies a rollback plan; the caller holds the lock.
func restore(ctx context.Context, env *Env, plan RollbackPlan, boot bool) (*RollbackReport, error) {
	start := env.now()
	dir := env.Config.StateDir
	log := env.log().With("snapshot", plan.SnapshotID)
	rep := &RollbackReport{SnapshotID: plan.SnapshotID, Reason: plan.Reason}
	step := func(name string, t0 time.Time) {
		rep.Timings = append(rep.Timings, Timing{Step: name, Duration: millis.Duration(env.now().Sub(t0))})
	}
	failed := func(err error) (*RollbackReport, error) {
		log.Error("rollback failed", "err", err)
		_ = env.state().Audit(state.Event{Action: state.ActionRollbackFailed, SnapshotID: plan.SnapshotID, Outcome: state.OutcomeFailed, Reason: err.Error()})
		return rep, &Error{Code: CodeRollbackFailed, Err: err}
	}

	t0 := env.now()
	m, err := snapshot.Load(dir, plan.SnapshotID)
	if err == nil {
		err = snapshot.Verify(m)
	}
	if err != nil {
		if errors.Is(err, snapshot.ErrCorrupt) || errors.Is(err, snapshot.ErrNotFound) {
			return failed(fmt.Errorf("snapshot %s refused, nothing was touched: %w; restore by hand from another snapshot (`mcpctl snapshot list`, then `mcpctl rollback --snapshot ID`)", plan.SnapshotID, err))
		}
		return failed(fmt.Errorf("load snapshot %s: %w", plan.SnapshotID, err))
	}
	rep.Version = m.Version
	res, err := snapshot.Restore(m)
	if err != nil {
		return failed(fmt.Errorf("restore snapshot %s: %w; run `mcpctl rollback --snapshot %s` again to complete it", plan.SnapshotID, err, plan.SnapshotID))
	}
	rep.Changes = res.Changes
	step("restore", t0)

	hasSocket := snapshotHasSocket(m, env.Config.UnitDir, env.socketUnit())
	facts, err := env.slotFacts(ctx)
	if err != nil {
		return failed(err)
	}
	slots := PlanSlots(env.Config.Backend.Unit, facts, m.Version)
	keep := ""
	if s := serving(facts); s != nil && s.Unit == slots.Keep {
		keep = s.Unit
	}
	healthy := keep != "" && env.verifier().OK(ctx, env.backendURL(), "/healthz") == nil
	// The build is identified by its digest, not by the release's name
	// (which an operator may once have typed).
	_, build, infoErr := env.info(ctx, env.backendURL())
	anyRunning := false
	for _, f := range facts {
		anyRunning = anyRunning || f.Running()
	}
	switch {
	case res.Changed() == 0 && healthy && len(slots.Old)+len(slots.StopFirst) == 0 && infoErr == nil && (m.Digest == "" || build == m.Digest):
		rep.Noop = true
		rep.Reason = fmt.Sprintf("snapshot %s (%s) is already in place and running: no-op", plan.SnapshotID, m.Version)
	case boot && !anyRunning:
		// The boot-time unit runs ordered before the backend: starting it
		// from here would wait on ourselves. Point both slots at the
		// restored release and reload, so what systemd starts next is it.
		t0 = env.now()
		if err := env.restoreUnits(ctx, m.Version, hasSocket); err != nil {
			return failed(err)
		}
		for _, f := range facts {
			_ = env.Systemd.ResetFailed(ctx, f.Unit)
		}
		step("daemon-reload", t0)
	default:
		t0 = env.now()
		if err := env.restoreUnits(ctx, m.Version, hasSocket); err != nil {
			return failed(err)
		}
		// The restored release starts in the idle slot beside the serving
		// one and takes over only once verified, or, parked since a
		// cutover not yet confirmed, takes over again at once: no moment
		// without a process accepting.
		tk, why := env.applySlots(ctx, slots, m.Version, m.Digest, 30*time.Second, false)
		if why != nil {
			return failed(fmt.Errorf("back to %s: %s", m.Version, strings.Join(why, "; ")))
		}
		rep.Restarted = slots.Keep == "" && slots.Resume == ""
		rep.Takeover = tk
		step("restart", t0)
		t0 = env.now()
		if err := env.waitReady(ctx, env.backendURL(), m.Digest, 15*time.Second); err != nil {
			return failed(fmt.Errorf("restored %s but the backend is not healthy: %w", m.Version, err))
		}
		if err := env.settleSlots(m.Version); err != nil {
			log.Warn("slot links", "err", err)
		}
		step("verify", t0)
	}

	if err := disarm(ctx, env); err != nil && !errors.Is(err, unitstate.ErrAlreadyFired) {
		log.Warn("disarm after rollback", "err", err)
	}
	if plan.Nonce != "" {
		if err := env.state().ClearPendingIf(plan.Nonce); err != nil {
			log.Warn("clear pending marker", "err", err)
		}
	}
	rep.Duration = millis.Duration(env.now().Sub(start))
	outcome := state.OutcomeOK
	if rep.Noop {
		outcome = state.OutcomeNoop
	}
	log.Info("rolled back", "version", m.Version, "noop", rep.Noop, "duration", rep.Duration.D())
	_ = env.state().Audit(state.Event{Action: state.ActionRolledBack, ToVersion: m.Version, SnapshotID: plan.SnapshotID, Outcome: outcome, Reason: rep.Reason,
		Details: map[string]string{"duration": rep.Duration.String()}})
	rep.OK = true
	return rep, nil
}

// restoreUnits makes systemd read the restored files, with production's
// units re-rendered by this mcpctl (the slot layout is mcpctl's, not the
// release's: a snapshot older than the slots restores the release, not the
// single unit), both slots pointing at version when neither runs.
func (e *Env) restoreUnits(ctx context.Context, version string, hasSocket bool) error {
	if err := writeUnitIfChanged(e); err != nil {
		return fmt.Errorf("units: %w", err)
	}
	if err := e.Systemd.DaemonReload(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	// The socket is restored with the units; a listening one is left
	// alone, so the takeover below is invisible to clients.
	if err := e.settleSocket(ctx, hasSocket || e.Config.ValidateTunnels() == nil); err != nil {
		return err
	}
	if facts, err := e.slotFacts(ctx); err == nil {
		for _, f := range facts {
			if f.Slot != "" && !f.Running() {
				if err := e.setSlotLink(f.Slot, version); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// disarm stops the armed rollback timer, if any, and confirms it is gone. A
// timer that already fired and whose service has finished (a failed run
// stays loaded as failed) is a leftover: it is reset and waited away. A
// service still running is left alone (ErrAlreadyFired).
func disarm(ctx context.Context, env *Env) error {
	gone, err := env.Systemd.Gone(ctx, RollbackTimer, RollbackService)
	if err != nil || gone {
		return err
	}
	err = env.Systemd.DisarmTransient(ctx, RollbackTimer, RollbackService)
	if !errors.Is(err, unitstate.ErrAlreadyFired) {
		return err
	}
	for _, u := range []string{RollbackTimer, RollbackService} {
		st, serr := env.Systemd.Unit(ctx, u)
		if serr != nil {
			return errors.Join(err, serr)
		}
		if st.ActiveState != "inactive" && st.ActiveState != "failed" && st.LoadState != "not-found" {
			return err
		}
	}
	for _, u := range []string{RollbackService, RollbackTimer} {
		if rerr := env.Systemd.ResetFailed(ctx, u); rerr != nil {
			env.log().Debug("reset-failed a leftover rollback unit", "unit", u, "err", rerr)
		}
	}
	if werr := env.Systemd.WaitGone(ctx, RollbackTimer, RollbackService); werr != nil {
		return fmt.Errorf("a finished rollback run is still loaded: %w", werr)
	}
	return nil
}

// Disarm is mcpctl rollback disarm: stop the armed timer and clear the marker.
func Disarm(ctx context.Context, env *Env) error {
	release, err := env.lock(ctx, "rollback disarm", 0)
	if err != nil {
		return &Error{Code: CodeFailed, Err: fmt.Errorf("disarm: %w", err)}
	}
	defer release()
	if err := disarm(ctx, env); err != nil {
		return &Error{Code: CodeFailed, Err: fmt.Errorf("disarm: %w", err)}
	}
	if err := env.state().ClearPending(); err != nil {
		return &Error{Code: CodeFailed, Err: fmt.Errorf("disarm: %w", err)}
	}
	_ = env.state().Audit(state.Event{Action: state.ActionDisarmed, Outcome: state.OutcomeOK, Reason: "mcpctl rollback disarm"})
	return nil
}
