package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// A crash loop (seven quick OOM kills, a build that dies at once) makes
// systemd restart the slot until its start limit (units.StartLimitBurst
// starts in units.StartLimitInterval); then it fails the slot and, by its
// rule for socket-activated services, the socket with it
// (service-start-limit-hit): the port closes and systemd never tries
// again. Recover is what brings it back: reset the failed units and start
// them again, or, right after a cutover not yet confirmed, roll back to its
// snapshot as a failed verification would.

// FailedUnit is one production unit systemd gave up on.
type FailedUnit struct {
	Unit string `json:"unit"`
	// Result is systemd's reason (start-limit-hit, signal, exit-code,
	// service-start-limit-hit for the socket ...).
	Result string `json:"result,omitempty"`
	// NRestarts are systemd's automatic restarts of it before it gave up.
	NRestarts    uint32 `json:"nRestarts"`
	InvocationID string `json:"invocationId,omitempty"`
}

// Outage is production down for good by systemd's own account: its socket
// failed, or no production unit runs and one failed. systemd starts neither
// again by itself.
type Outage struct {
	Socket      string       `json:"socket"`
	SocketState string       `json:"socketState"`
	Failed      []FailedUnit `json:"failed"`
}

// String names the failed units and why, for messages.
func (o *Outage) String() string {
	var parts []string
	for _, f := range o.Failed {
		s := f.Unit + " failed"
		if f.Result != "" {
			s += " (" + f.Result + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// Starts is the starts systemd made of the failed units: each one's first
// start and its automatic restarts.
func (o *Outage) Starts() int {
	n := 0
	for _, f := range o.Failed {
		if !strings.HasSuffix(f.Unit, ".socket") {
			n += int(f.NRestarts) + 1
		}
	}
	return n
}

// ID names this failure (its failed units' invocations), so that a
// failure seen again is counted once.
func (o *Outage) ID() string {
	var parts []string
	for _, f := range o.Failed {
		parts = append(parts, f.Unit+"@"+f.InvocationID)
	}
	return strings.Join(parts, ",")
}

// Down decides from production's units (the socket, then the slots and the
// legacy unit; nil entries are units systemd does not know) whether
// production is down for good, nil when not: a slot that serves, or that
// systemd is restarting itself (activating), is no outage, and neither is
// a socket stopped on purpose (inactive) with nothing failed. A slot that
// runs in standby or parked serves nothing.
func Down(socket *unitstate.State, prod []*unitstate.State) *Outage {
	o := &Outage{}
	if socket != nil {
		o.Socket, o.SocketState = socket.Name, socket.ActiveState
	}
	running := false
	for _, u := range prod {
		if u == nil || !loaded(u) {
			continue
		}
		switch {
		case u.ActiveState == "failed":
			o.Failed = append(o.Failed, FailedUnit{Unit: u.Name, Result: u.Result, NRestarts: u.NRestarts, InvocationID: u.InvocationID})
		case unitstate.Running(u.ActiveState):
			// A slot in standby or parked by an interrupted cutover runs
			// but serves nothing: beside a failed one it is no server.
			switch u.StatusText {
			case mcpwire.SlotStandby, mcpwire.SlotParked, mcpwire.SlotParkedFinishing, mcpwire.SlotHandingOff:
			default:
				running = true
			}
		}
	}
	socketFailed := socket != nil && socket.ActiveState == "failed"
	if socketFailed {
		o.Failed = append(o.Failed, FailedUnit{Unit: socket.Name, Result: socket.Result, InvocationID: socket.InvocationID})
	}
	if socketFailed || (!running && len(o.Failed) > 0) {
		return o
	}
	return nil
}

// ObserveOutage reads production's units (service is backend.unit) and
// returns Down over them.
func ObserveOutage(ctx context.Context, sd UnitReader, service string) (*Outage, error) {
	sock, err := sd.Unit(ctx, units.Socket(service))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", units.Socket(service), err)
	}
	if !loaded(sock) {
		sock = nil
	}
	var prod []*unitstate.State
	for _, n := range append([]string{service}, units.SlotUnit(service, units.SlotBlue), units.SlotUnit(service, units.SlotGreen)) {
		st, err := sd.Unit(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", n, err)
		}
		prod = append(prod, st)
	}
	return Down(sock, prod), nil
}

// RecoverPlan is the decision of PlanRecover.
type RecoverPlan struct {
	// Act is false when there is nothing to recover (Refusal empty) or
	// nothing that can be done (Refusal says why).
	Act     bool
	Reason  string
	Refusal string
	// Rollback is set when the crash loop follows a cutover not yet
	// confirmed: its snapshot is restored, as a failed verification would.
	Rollback *RollbackPlan
	// Release is the release started again otherwise (current).
	Release string
}

// PlanRecover decides how production comes back from outage o (nil: it is
// not down): the pending cutover's snapshot if a cutover is unconfirmed,
// else the current release started again.
func PlanRecover(o *Outage, pending *state.Pending, current string) RecoverPlan {
	switch {
	case o == nil:
		return RecoverPlan{Reason: "production is not down: no production unit or socket failed"}
	case pending != nil:
		return RecoverPlan{Act: true, Rollback: &RollbackPlan{Act: true, SnapshotID: pending.SnapshotID, Nonce: pending.Nonce,
			Reason: fmt.Sprintf("crash loop after the unconfirmed cutover %s -> %s (%s): restoring its snapshot %s", pending.FromVersion, pending.ToVersion, o, pending.SnapshotID)},
			Reason: fmt.Sprintf("%s right after the unconfirmed cutover %s -> %s: rolling back to snapshot %s", o, pending.FromVersion, pending.ToVersion, pending.SnapshotID)}
	case current == "":
		return RecoverPlan{Refusal: fmt.Sprintf("%s and no current release to start: run `mcpctl install`", o)}
	}
	return RecoverPlan{Act: true, Release: current, Reason: fmt.Sprintf("%s: starting %s again", o, current)}
}

// RecoverOptions say who recovers and what its audit record adds.
type RecoverOptions struct {
	// By is who recovers ("mcpctl recover", "watchdog"), in the audit record.
	By string
	// Details are added to the audit record (the watchdog's attempt and
	// backoff).
	Details map[string]string
	// LockWait is the least time to wait for the lock (Recover only).
	LockWait time.Duration
}

// RecoverReport says what a recovery did.
type RecoverReport struct {
	// OK is the verdict: production answers (exit 0).
	OK     bool    `json:"ok"`
	Noop   bool    `json:"noop"`
	Reason string  `json:"reason"`
	Outage *Outage `json:"outage,omitempty"`
	// Version is the release that serves now.
	Version  string          `json:"version,omitempty"`
	Takeover *Takeover       `json:"takeover,omitempty"`
	Rollback *RollbackReport `json:"rollback,omitempty"`
	// Duration is last: a ...Ms field closes the object.
	Duration millis.Duration `json:"durationMs"`
}

// ErrProductionDown is a command that would do nothing (a no-op) while
// production is down: it says so instead of succeeding (exit 1), and names
// `mcpctl recover`.
var ErrProductionDown = errors.New("production is down")

// DownError is ErrProductionDown with the outage and what the command
// would have done, nil when o is nil.
func DownError(o *Outage, what string) error {
	if o == nil {
		return nil
	}
	return &Error{Code: CodeFailed, Err: fmt.Errorf("%w (%s) and %s: run `mcpctl recover` (the watchdog also retries by itself)", ErrProductionDown, o, what)}
}

// Recover is mcpctl recover: takes the lock and runs RecoverHeld.
func Recover(ctx context.Context, env *Env, opts RecoverOptions) (*RecoverReport, error) {
	release, err := env.lock(ctx, "recover", opts.LockWait)
	if err != nil {
		return nil, &Error{Code: CodeFailed, Err: fmt.Errorf("recover: %w", err)}
	}
	defer release()
	return RecoverHeld(ctx, env, opts)
}

// RecoverHeld brings production back from an outage; the caller holds the
// mcpctl lock (the watchdog's round does). Production not down and
// answering is a no-op; not down but not answering is left to systemd (it
// restarts the slot itself) and is an error. The failed units are reset
// and started again (the socket first, so connections queue from then on),
// or the pending cutover's snapshot is restored. A failure here is exit 4:
// production stays down and a human is needed.
func RecoverHeld(ctx context.Context, env *Env, opts RecoverOptions) (*RecoverReport, error) {
	start := env.now()
	service := env.Config.Backend.Unit
	o, err := ObserveOutage(ctx, env.Systemd, service)
	if err != nil {
		return nil, &Error{Code: CodeFailed, Err: fmt.Errorf("recover: %w", err)}
	}
	pending, err := env.state().ReadPending()
	if err != nil {
		return nil, &Error{Code: CodeFailed, Err: fmt.Errorf("recover: read pending marker: %w", err)}
	}
	current, err := env.store().Current()
	if err != nil && !errors.Is(err, release.ErrNoCurrent) {
		return nil, &Error{Code: CodeFailed, Err: fmt.Errorf("recover: %w", err)}
	}
	plan := PlanRecover(o, pending, current)
	rep := &RecoverReport{Reason: plan.Reason, Outage: o}
	log := env.log().With("by", opts.By)
	log.Info("recover plan", "act", plan.Act, "reason", plan.Reason, "refusal", plan.Refusal)
	details := map[string]string{"by": opts.By}
	for k, v := range opts.Details {
		details[k] = v
	}
	if o != nil {
		details["failed"] = o.String()
	}
	audit := func(outcome, reason, version string) {
		_ = env.state().Audit(state.Event{Action: state.ActionRecover, ToVersion: version, Outcome: outcome, Reason: reason, Details: details})
	}
	if !plan.Act && plan.Refusal == "" {
		if err := env.verifier().OK(ctx, env.backendURL(), "/healthz"); err != nil {
			return rep, &Error{Code: CodeFailed, Err: fmt.Errorf("recover: no production unit failed, but production does not answer (%w): systemd restarts a slot that is not failed by itself; see `mcpctl status`", err)}
		}
		rep.OK, rep.Noop = true, true
		rep.Duration = millis.Duration(env.now().Sub(start))
		return rep, nil
	}
	if plan.Refusal != "" {
		audit(state.OutcomeRefused, plan.Refusal, "")
		return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("recover: %s", plan.Refusal)}
	}
	if plan.Rollback != nil {
		// The socket is not started here: a connection would start the
		// boot slot on its link, which names the unconfirmed release; the
		// restore points the links back first and starts the slot, which
		// starts the socket with it.
		if err := env.reopenSocket(ctx, o, false); err != nil {
			audit(state.OutcomeFailed, plan.Reason+": "+err.Error(), "")
			return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("recover: %w", err)}
		}
		rb, err := restore(ctx, env, *plan.Rollback, false)
		rep.Rollback = rb
		rep.Duration = millis.Duration(env.now().Sub(start))
		if err != nil {
			audit(state.OutcomeFailed, plan.Reason+": "+err.Error(), "")
			return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("recover: %w", err)}
		}
		if rb != nil {
			rep.Version, rep.Takeover = rb.Version, rb.Takeover
		}
		rep.OK = true
		audit(state.OutcomeOK, plan.Reason, rep.Version)
		return rep, nil
	}
	tk, err := env.restart(ctx, o, plan.Release)
	rep.Takeover = tk
	rep.Duration = millis.Duration(env.now().Sub(start))
	if err != nil {
		log.Error("recover failed", "err", err)
		audit(state.OutcomeFailed, plan.Reason+": "+err.Error(), plan.Release)
		return rep, &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("recover: %w", err)}
	}
	rep.OK, rep.Version = true, plan.Release
	log.Info("recovered", "version", plan.Release, "duration", rep.Duration.D())
	audit(state.OutcomeOK, plan.Reason, plan.Release)
	return rep, nil
}

// restart resets o's failed units and starts production again on release
// version: the socket first (connections wait in its backlog from then on),
// then a slot, ready and reporting version.
func (e *Env) restart(ctx context.Context, o *Outage, version string) (*Takeover, error) {
	if err := e.reopenSocket(ctx, o, true); err != nil {
		return nil, err
	}
	facts, err := e.slotFacts(ctx)
	if err != nil {
		return nil, err
	}
	tk, why := e.applySlots(ctx, PlanSlots(e.Config.Backend.Unit, facts, version), version, "", e.readyTimeout(), false)
	if why != nil {
		return tk, fmt.Errorf("start %s: %s", version, strings.Join(why, "; "))
	}
	if err := e.waitReady(ctx, e.backendURL(), "", 15*time.Second); err != nil {
		return tk, fmt.Errorf("started %s but the backend is not healthy: %w", version, err)
	}
	if err := e.settleSlots(version); err != nil {
		e.log().Warn("slot links", "err", err)
	}
	return tk, nil
}

// reopenSocket resets o's failed units and, when start is set, starts the
// socket again if it is not listening. A failed socket closed its descriptors; a slot still
// running beside the failed one (parked or in standby: it serves nothing)
// holds its own copy of the old listener, so the port stays bound and
// the socket could not bind it again: such a slot is stopped first.
// Production is down already, so nothing accepting is lost.
func (e *Env) reopenSocket(ctx context.Context, o *Outage, start bool) error {
	sd := e.Systemd
	if o.SocketState == "failed" {
		facts, err := e.slotFacts(ctx)
		if err != nil {
			return err
		}
		for _, f := range facts {
			if f.Running() {
				e.log().Info("stopping a slot that holds the failed socket's port", "unit", f.Unit, "status", f.StatusText)
				if err := sd.Stop(ctx, f.Unit); err != nil {
					return fmt.Errorf("stop %s (it holds the failed socket's port): %w", f.Unit, err)
				}
				_ = sd.ResetFailed(ctx, f.Unit)
			}
		}
	}
	for _, f := range o.Failed {
		if err := sd.ResetFailed(ctx, f.Unit); err != nil {
			return fmt.Errorf("reset-failed %s: %w", f.Unit, err)
		}
	}
	if !start {
		return nil
	}
	if sock := e.socketFact(ctx, e.socketUnit()); sock.Loaded() && !sock.Active() {
		if err := sd.Start(ctx, e.socketUnit()); err != nil {
			return err
		}
	}
	return nil
}
