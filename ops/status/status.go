// Package status observes what `mcpctl status` shows: production (the
// serving slot, and any process beside it), the canary, the tunnels, the
// rollback (marker and timer), the last cutovers and rollbacks, the running
// jobs. Units are read through UnitReader, which the caller passes in, so
// nothing here speaks D-Bus; without systemd the HTTP checks still run.
// Rendering is the caller's.
package status

import (
	"context"
	"encoding/json"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// Events is how many cutover and rollback records a report keeps.
const Events = 8

// UnitReader is the part of the systemd client status reads. A reader
// that is also a deploy.JobLister lists the running jobs too.
type UnitReader interface {
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
}

// UnitView is a unit as status shows it.
type UnitView struct {
	Unit        string    `json:"unit"`
	ActiveState string    `json:"activeState"`
	SubState    string    `json:"subState,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	NRestarts   uint32    `json:"nRestarts"`
	MainPID     uint32    `json:"mainPID,omitempty"`
	Err         string    `json:"error,omitempty"`
}

// ServiceView is a backend (production or canary): its unit, what it
// serves and how it answers.
type ServiceView struct {
	UnitView
	URL string `json:"url"`
	// Version is what system.info reports, else (production only) the
	// release current points to, with VersionFrom saying which.
	Version     string           `json:"version,omitempty"`
	VersionFrom string           `json:"versionFrom,omitempty"`
	Healthz     int              `json:"healthz"` // HTTP status; 0 when no answer
	Readyz      int              `json:"readyz"`
	Admission   *mcpwire.Metrics `json:"admission,omitempty"`
}

// TunnelView is a tunnel: its unit and whether the backend answers
// through it.
type TunnelView struct {
	Name string `json:"name"`
	UnitView
	URL     string `json:"url"`
	Healthz int    `json:"healthz"`
}

// Rollback states of RollbackView.State.
const (
	RollbackNone = "none"
	// RollbackArmed: the timer counts down (with its marker).
	RollbackArmed = "armed"
	// RollbackPendingNotArmed: a marker with no active timer (a reboot, a
	// failed or killed rollback): only the boot-time check or a human acts.
	RollbackPendingNotArmed = "pending-not-armed"
	// RollbackStrayTimer: an active timer without a marker: it will no-op
	// on its stale nonce, but should be disarmed.
	RollbackStrayTimer = "timer-without-marker"
	// RollbackMarkerUnreadable: the pending marker exists but cannot be
	// read, so whether a cutover is unconfirmed is unknown.
	RollbackMarkerUnreadable = "marker-unreadable"
)

// RollbackView is whether a rollback is armed, and of what.
type RollbackView struct {
	// Armed means the rollback timer is active: only then does anything undo
	// the cutover by itself before the next boot.
	Armed bool   `json:"armed"`
	State string `json:"state"`
	// Pending is the unconfirmed cutover's marker; TimerState the transient
	// timer's ActiveState ("" when not loaded).
	Pending    *state.Pending `json:"pending,omitempty"`
	TimerState string         `json:"timerState,omitempty"`
	Err        string         `json:"error,omitempty"`
	// Left is last: its ...Ms field has always closed the object.
	Left millis.Duration `json:"leftMs"`
}

// BesideView is a production unit running beside the serving one.
type BesideView struct {
	Unit        string `json:"unit"`
	ActiveState string `json:"activeState"`
	// Status is its process's own status text (mcpwire.Slot*).
	Status  string `json:"status,omitempty"`
	MainPID uint32 `json:"mainPID,omitempty"`
}

// Report is mcpctl status.
type Report struct {
	Time       time.Time     `json:"time"`
	Production ServiceView   `json:"production"`
	Canary     ServiceView   `json:"canary"`
	Tunnels    []TunnelView  `json:"tunnels"`
	Rollback   RollbackView  `json:"rollback"`
	Events     []state.Event `json:"events"`
	EventsErr  string        `json:"eventsError,omitempty"`
	// Beside are the production processes running beside the serving one:
	// a slot in standby, handing off or parked during a cutover (the old
	// one stays parked until the cutover is confirmed, saying so while it
	// still finishes calls accepted before the handoff), or one an
	// interrupted run left (the next cutover or rollback stops it).
	Beside []BesideView `json:"beside,omitempty"`
	// SystemdErr is why systemd could not be reached: unit states, restarts
	// and the rollback timer are then unknown, the HTTP checks still ran.
	SystemdErr string `json:"systemdError,omitempty"`
	// Jobs are the backend's running jobs (their own units, which
	// cutovers and rollbacks leave running).
	Jobs    []deploy.JobUnit `json:"jobs"`
	JobsErr string           `json:"jobsError,omitempty"`
	// CrashLoop is production's last crash loop: systemd gave up on it
	// (the start limit failed a slot and the socket) and the watchdog's
	// attempts to start it again; nil when there was none lately.
	CrashLoop *CrashLoopView `json:"crashLoop,omitempty"`
	// Warnings are guardrails this host does not enforce (MemoryWarning).
	Warnings []string `json:"warnings,omitempty"`
}

// CrashLoopView is a crash loop as status shows it: "crash loop: N starts
// in M s, next try in T".
type CrashLoopView struct {
	// Down: systemd has given up on production now (Failed say which
	// units and why); false once it serves again.
	Down   bool                `json:"down"`
	Failed []deploy.FailedUnit `json:"failed,omitempty"`
	// Starts is N: the starts systemd made in the loop (each failed slot's
	// first start and automatic restarts, over every failure the watchdog
	// found).
	Starts int `json:"starts"`
	// Since is when the watchdog first found production failed (zero:
	// it has not run since).
	Since time.Time `json:"since,omitzero"`
	// Attempts are the watchdog's recoveries so far, the last one's
	// outcome and error.
	Attempts    int       `json:"attempts"`
	LastAttempt time.Time `json:"lastAttempt,omitzero"`
	LastOutcome string    `json:"lastOutcome,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	NextTry     time.Time `json:"nextTry,omitzero"`
	Recovered   time.Time `json:"recovered,omitzero"`
	// Window is M: systemd's start-limit window for the first failure,
	// plus the time from the first failure found to the last.
	Window millis.Duration `json:"windowMs"`
	// NextIn is T, the time left until the watchdog's next attempt: 0 when
	// it may try in its next round (every 30 s).
	NextIn millis.Duration `json:"nextInMs"`
}

// PlanCrashLoop is the crash loop from production's outage now (nil: not
// down) and the watchdog's record (nil: none); nil when neither has one.
func PlanCrashLoop(o *deploy.Outage, r *state.Recovery, now time.Time) *CrashLoopView {
	if o == nil && r == nil {
		return nil
	}
	v := &CrashLoopView{Down: o != nil, Window: millis.Duration(units.StartLimitInterval)}
	if o != nil {
		v.Failed, v.Starts = o.Failed, o.Starts()
	}
	if r != nil {
		v.Since, v.Attempts, v.LastAttempt, v.LastOutcome, v.LastError = r.Since, r.Attempts, r.LastAttempt, r.LastOutcome, r.LastError
		v.NextTry, v.Recovered = r.NextTry, r.Recovered
		if r.Starts > 0 {
			v.Starts = r.Starts
		}
		v.Window = millis.Duration(units.StartLimitInterval + r.LastFailure.Sub(r.FirstFailure))
		if o != nil && o.ID() != r.Failure {
			// A failure the watchdog has not seen yet counts too, and
			// happened by now.
			v.Starts = r.Starts + o.Starts()
			v.Window = millis.Duration(units.StartLimitInterval + now.Sub(r.FirstFailure))
		}
		if v.Down && r.NextTry.After(now) {
			v.NextIn = millis.Duration(r.NextTry.Sub(now).Round(time.Second))
		}
	}
	return v
}

// Gather observes everything status shows; each probe is bounded so one
// hung part cannot hide the rest.
func Gather(ctx context.Context, cfg *ctlconfig.Config, sd UnitReader, v *verify.Client, now time.Time) *Report {
	rep := &Report{Time: now}
	// Production is whichever slot (or pre-slot unit) accepts now; any
	// other production process runs beside it.
	facts, err := deploy.ProductionFacts(ctx, sd, cfg.Backend.Unit)
	if err != nil {
		facts = nil
	}
	serving := deploy.ServingOf(facts, cfg.Backend.Unit)
	rep.Production = gatherService(ctx, sd, v, serving, "http://"+cfg.Backend.Listen, true)
	for _, f := range facts {
		if f.Unit != serving && f.Running() {
			rep.Beside = append(rep.Beside, BesideView{Unit: f.Unit, ActiveState: f.ActiveState, Status: f.StatusText, MainPID: f.MainPID})
		}
	}
	if rep.Production.Version == "" {
		if cur, err := (&release.Store{Root: cfg.Install.Root}).Current(); err == nil && cur != "" {
			rep.Production.Version, rep.Production.VersionFrom = cur, "current link"
		}
	}
	rep.Canary = gatherService(ctx, sd, v, cfg.Canary.Unit, "http://"+cfg.Canary.Listen, false)
	for _, t := range cfg.Tunnels {
		tv := TunnelView{Name: t.Name, UnitView: GatherUnit(ctx, sd, t.Unit), URL: t.URL}
		if t.URL != "" {
			tv.Healthz = code(ctx, v.Healthz, t.URL)
		}
		rep.Tunnels = append(rep.Tunnels, tv)
	}
	p, err := state.Dir(cfg.StateDir).ReadPending()
	rep.Rollback = RollbackView{Pending: p}
	if err != nil {
		rep.Rollback.Err = err.Error()
	}
	if st, err := sd.Unit(ctx, deploy.RollbackTimer); err == nil && st.LoadState != "not-found" {
		rep.Rollback.TimerState = st.ActiveState
	}
	rep.Rollback = PlanRollback(rep.Rollback, now)
	outage, err := deploy.ObserveOutage(ctx, sd, cfg.Backend.Unit)
	if err != nil {
		outage = nil
	}
	var rec *state.Recovery
	if w, err := state.Dir(cfg.StateDir).LoadWatchdog(); err == nil {
		rec = w.Recovery
	}
	rep.CrashLoop = PlanCrashLoop(outage, rec, now)
	if w := MemoryWarning(CgroupControllers); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	events, err := state.Dir(cfg.StateDir).Tail(200)
	if err != nil {
		rep.EventsErr = err.Error()
	}
	rep.Events = DeployEvents(events, Events)
	rep.Jobs = []deploy.JobUnit{}
	if l, ok := sd.(deploy.JobLister); ok {
		if js, err := deploy.RunningJobs(ctx, l); err != nil {
			rep.JobsErr = err.Error()
		} else if js != nil {
			rep.Jobs = js
		}
	} else {
		rep.JobsErr = "unknown: the job units are listed over D-Bus"
	}
	return rep
}

// GatherUnit reads one unit; a unit systemd does not know is "not
// installed", one that could not be read "unknown" with why.
func GatherUnit(ctx context.Context, sd UnitReader, unit string) UnitView {
	u := UnitView{Unit: unit}
	st, err := sd.Unit(ctx, unit)
	if err != nil {
		u.ActiveState, u.Err = "unknown", err.Error()
		return u
	}
	u.ActiveState, u.SubState, u.NRestarts, u.MainPID = st.ActiveState, st.SubState, st.NRestarts, st.MainPID
	if st.ActiveState == "active" {
		u.Since = st.ActiveEnterTimestamp
	}
	if st.LoadState == "not-found" {
		u.ActiveState = "not installed"
	}
	return u
}

func gatherService(ctx context.Context, sd UnitReader, v *verify.Client, unit, url string, admissionSnap bool) ServiceView {
	s := ServiceView{UnitView: GatherUnit(ctx, sd, unit), URL: url}
	// An unknown unit state (no systemd) still gets the HTTP checks.
	if s.ActiveState != "active" && s.ActiveState != "unknown" {
		return s
	}
	s.Healthz = code(ctx, v.Healthz, url)
	s.Readyz = code(ctx, v.Readyz, url)
	pctx, cancel := context.WithTimeout(ctx, verify.ProbeTimeout)
	defer cancel()
	if ver, _, err := v.SystemInfo(pctx, url); err == nil {
		s.Version, s.VersionFrom = ver, "system.info"
	}
	if admissionSnap {
		if c, body, err := v.Metrics(pctx, url); err == nil && c == 200 {
			var snap mcpwire.Metrics
			if json.Unmarshal(body, &snap) == nil {
				s.Admission = &snap
			}
		}
	}
	return s
}

// code is the HTTP status of one probe, 0 when nothing answered.
func code(ctx context.Context, probe func(context.Context, string) (int, []byte, error), url string) int {
	ctx, cancel := context.WithTimeout(ctx, verify.ProbeTimeout)
	defer cancel()
	c, _, err := probe(ctx, url)
	if err != nil {
		return 0
	}
	return c
}

// PlanRollback settles whether a rollback is armed and its time left: the
// marker says a cutover is unconfirmed, the timer whether it is still
// counting down. A marker alone is not armed: after a reboot only the
// boot-time check is left, and after a failed rollback a human is needed.
func PlanRollback(r RollbackView, now time.Time) RollbackView {
	r.Armed = r.TimerState == "active"
	switch {
	case r.Err != "" && r.Pending == nil:
		r.State = RollbackMarkerUnreadable
	case r.Pending != nil && r.Armed:
		r.State = RollbackArmed
	case r.Pending != nil:
		r.State = RollbackPendingNotArmed
	case r.Armed:
		r.State = RollbackStrayTimer
	default:
		r.State = RollbackNone
	}
	if r.Pending != nil {
		r.Left = millis.Duration(max(r.Pending.Remaining(now), 0).Round(time.Second))
	}
	return r
}

// DeployEvents keeps the last n cutover and rollback records, newest first.
func DeployEvents(events []state.Event, n int) []state.Event {
	var out []state.Event
	for i := len(events) - 1; i >= 0 && len(out) < n; i-- {
		switch events[i].Action {
		case state.ActionCutover, state.ActionRolledBack, state.ActionRollbackFailed:
			out = append(out, events[i])
		}
	}
	return out
}
