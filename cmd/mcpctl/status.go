package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/internal/textwrap"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// statusEvents is how many cutover and rollback records status shows.
const statusEvents = 8

// unitView is a unit as status shows it.
type unitView struct {
	Unit        string    `json:"unit"`
	ActiveState string    `json:"activeState"`
	SubState    string    `json:"subState,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	NRestarts   uint32    `json:"nRestarts"`
	MainPID     uint32    `json:"mainPID,omitempty"`
	Err         string    `json:"error,omitempty"`
}

// serviceView is a backend (production or canary): its unit, what it serves
// and how it answers.
type serviceView struct {
	unitView
	URL string `json:"url"`
	// Version is what system.info reports, else (production only) the
	// release current points to, with VersionFrom saying which.
	Version     string           `json:"version,omitempty"`
	VersionFrom string           `json:"versionFrom,omitempty"`
	Healthz     int              `json:"healthz"` // HTTP status; 0 when no answer
	Readyz      int              `json:"readyz"`
	Admission   *mcpwire.Metrics `json:"admission,omitempty"`
}

type tunnelView struct {
	Name string `json:"name"`
	unitView
	URL     string `json:"url"`
	Healthz int    `json:"healthz"`
}

// Rollback states of rollbackView.State.
const (
	rollbackNone = "none"
	// rollbackArmed: the timer counts down (with its marker).
	rollbackArmed = "armed"
	// rollbackPendingNotArmed: a marker with no active timer (a reboot, a
	// failed or killed rollback): only the boot-time check or a human acts.
	rollbackPendingNotArmed = "pending-not-armed"
	// rollbackStrayTimer: an active timer without a marker: it will no-op
	// on its stale nonce, but should be disarmed.
	rollbackStrayTimer = "timer-without-marker"
	// rollbackMarkerUnreadable: the pending marker exists but cannot be
	// read, so whether a cutover is unconfirmed is unknown.
	rollbackMarkerUnreadable = "marker-unreadable"
)

type rollbackView struct {
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

// besideView is a production unit running beside the serving one.
type besideView struct {
	Unit        string `json:"unit"`
	ActiveState string `json:"activeState"`
	// Status is its process's own status text (mcpwire.Slot*).
	Status  string `json:"status,omitempty"`
	MainPID uint32 `json:"mainPID,omitempty"`
}

// statusReport is mcpctl status.
type statusReport struct {
	Time       time.Time     `json:"time"`
	Production serviceView   `json:"production"`
	Canary     serviceView   `json:"canary"`
	Tunnels    []tunnelView  `json:"tunnels"`
	Rollback   rollbackView  `json:"rollback"`
	Events     []state.Event `json:"events"`
	EventsErr  string        `json:"eventsError,omitempty"`
	// Beside are the production processes running beside the serving one:
	// a slot in standby, handing off or parked during a cutover (the old
	// one stays parked until the cutover is confirmed), or one an
	// interrupted run left (the next cutover or rollback stops it).
	Beside []besideView `json:"beside,omitempty"`
	// SystemdErr is why systemd could not be reached: unit states, restarts
	// and the rollback timer are then unknown, the HTTP checks still ran.
	SystemdErr string `json:"systemdError,omitempty"`
	// Jobs are the backend's running jobs (their own units, which
	// cutovers and rollbacks leave running).
	Jobs    []deploy.JobUnit `json:"jobs"`
	JobsErr string           `json:"jobsError,omitempty"`
}

func statusCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "one screen: production, canary, tunnels, an armed rollback, the last cutovers and rollbacks",
		Action: func(c *cli.Context) error {
			b, err := connectOpsDegraded(c, false, d.logger)
			if err != nil {
				return err
			}
			var sd unitReader = noSystemd{b.sdErr}
			if b.sd != nil {
				defer b.sd.Close()
				sd = b.sd
			}
			rep := gatherStatus(c.Context, b.cfg, sd, b.verify, time.Now())
			if b.sdErr != nil {
				rep.SystemdErr = b.sdErr.Error()
			}
			d.out.print(rep, func(w io.Writer, st styles) { renderStatus(w, st, rep, d.out.width()) })
			return nil
		},
	}
}

// unitReader is the part of the systemd client status reads.
type unitReader interface {
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
}

var _ unitReader = (*systemd.Client)(nil)

// gatherStatus observes everything status shows; each probe is bounded so
// one hung part cannot hide the rest.
func gatherStatus(ctx context.Context, cfg *ctlconfig.Config, sd unitReader, v *verify.Client, now time.Time) *statusReport {
	rep := &statusReport{Time: now}
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
			rep.Beside = append(rep.Beside, besideView{Unit: f.Unit, ActiveState: f.ActiveState, Status: f.StatusText, MainPID: f.MainPID})
		}
	}
	if rep.Production.Version == "" {
		if cur, err := (&release.Store{Root: cfg.Install.Root}).Current(); err == nil && cur != "" {
			rep.Production.Version, rep.Production.VersionFrom = cur, "current link"
		}
	}
	rep.Canary = gatherService(ctx, sd, v, cfg.Canary.Unit, "http://"+cfg.Canary.Listen, false)
	for _, t := range cfg.Tunnels {
		tv := tunnelView{Name: t.Name, unitView: gatherUnit(ctx, sd, t.Unit), URL: t.URL}
		if t.URL != "" {
			tv.Healthz = code(ctx, v.Healthz, t.URL)
		}
		rep.Tunnels = append(rep.Tunnels, tv)
	}
	p, err := state.Dir(cfg.StateDir).ReadPending()
	rep.Rollback = rollbackView{Pending: p}
	if err != nil {
		rep.Rollback.Err = err.Error()
	}
	if st, err := sd.Unit(ctx, deploy.RollbackTimer); err == nil && st.LoadState != "not-found" {
		rep.Rollback.TimerState = st.ActiveState
	}
	rep.Rollback = planRollbackView(rep.Rollback, now)
	events, err := state.Dir(cfg.StateDir).Tail(200)
	if err != nil {
		rep.EventsErr = err.Error()
	}
	rep.Events = deployEvents(events, statusEvents)
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

func gatherUnit(ctx context.Context, sd unitReader, unit string) unitView {
	u := unitView{Unit: unit}
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

func gatherService(ctx context.Context, sd unitReader, v *verify.Client, unit, url string, admissionSnap bool) serviceView {
	s := serviceView{unitView: gatherUnit(ctx, sd, unit), URL: url}
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

// planRollbackView settles whether a rollback is armed and its time left: the
// marker says a cutover is unconfirmed, the timer whether it is still
// counting down. A marker alone is not armed: after a reboot only the
// boot-time check is left, and after a failed rollback a human is needed.
func planRollbackView(r rollbackView, now time.Time) rollbackView {
	r.Armed = r.TimerState == "active"
	switch {
	case r.Err != "" && r.Pending == nil:
		r.State = rollbackMarkerUnreadable
	case r.Pending != nil && r.Armed:
		r.State = rollbackArmed
	case r.Pending != nil:
		r.State = rollbackPendingNotArmed
	case r.Armed:
		r.State = rollbackStrayTimer
	default:
		r.State = rollbackNone
	}
	if r.Pending != nil {
		r.Left = millis.Duration(max(r.Pending.Remaining(now), 0).Round(time.Second))
	}
	return r
}

// rollbackLine describes a rollbackView in one line (status and rollback
// status); alarm renders the words that need attention.
func rollbackLine(rb rollbackView, alarm func(...string) string) string {
	switch rb.State {
	case rollbackArmed:
		p := rb.Pending
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, %s left (%s)", alarm("ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, rb.Left, p.TimerUnit)
	case rollbackPendingNotArmed:
		p := rb.Pending
		timer := rb.TimerState
		if timer == "" {
			timer = "not loaded"
		}
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, timer %s: a human is needed: run `mcpctl rollback --last` (the boot-time check would restore it at the next boot)",
			alarm("PENDING, NOT ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, timer)
	case rollbackStrayTimer:
		return fmt.Sprintf("%s timer %s without a pending marker: run `mcpctl rollback disarm`", alarm("ARMED"), rb.TimerState)
	case rollbackMarkerUnreadable:
		timer := rb.TimerState
		if timer == "" {
			timer = "not loaded"
		}
		return fmt.Sprintf("%s the pending-cutover marker cannot be read (%s); timer %s. Whether a cutover is unconfirmed is unknown: "+
			"run `mcpctl snapshot list`, then `mcpctl rollback --snapshot ID` to go back to a known snapshot, or `mcpctl rollback disarm` to keep what runs now (it clears the marker)",
			alarm("UNKNOWN"), rb.Err, timer)
	}
	return "none armed, no cutover pending"
}

// deployEvents keeps the last n cutover and rollback records, newest first.
func deployEvents(events []state.Event, n int) []state.Event {
	var out []state.Event
	for i := len(events) - 1; i >= 0 && len(out) < n; i-- {
		switch events[i].Action {
		case state.ActionCutover, state.ActionRolledBack, state.ActionRollbackFailed:
			out = append(out, events[i])
		}
	}
	return out
}

// renderStatus writes the status screen; lines fit width columns (0: as
// wide as they need), the time a unit is active since on its own line.
func renderStatus(w io.Writer, st styles, r *statusReport, width int) {
	wrap := func(s string) string { return textwrap.Wrap(s, width, "    ") }
	up := func(s string) string {
		if s == "active" {
			return st.ok.Render(s)
		}
		return st.bad.Render(s)
	}
	http := func(c int) string {
		switch c {
		case 200:
			return st.ok.Render("200")
		case 0:
			return st.bad.Render("no answer")
		}
		return st.bad.Render(fmt.Sprint(c))
	}
	since := func(u unitView) string {
		if u.Since.IsZero() {
			return ""
		}
		return fmt.Sprintf("since %s (%s)", u.Since.Local().Format("2006-01-02 15:04:05"), r.Time.Sub(u.Since).Round(time.Second))
	}
	unitLine := func(head string, u unitView) {
		s := since(u)
		if width <= 0 && s != "" {
			fmt.Fprintf(w, "%s %s %s, restarts %d\n", head, up(u.ActiveState), s, u.NRestarts)
		} else {
			fmt.Fprintf(w, "%s %s, restarts %d\n", head, up(u.ActiveState), u.NRestarts)
			if s != "" {
				fmt.Fprintf(w, "  %s\n", s)
			}
		}
		if u.Err != "" {
			fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.bad.Render("error:"), u.Err)))
		}
	}
	service := func(title string, s serviceView) {
		unitLine(st.title.Render(title)+" "+s.Unit, s.unitView)
		if s.Version != "" {
			fmt.Fprintf(w, "  version %s %s\n", s.Version, st.dim.Render("("+s.VersionFrom+")"))
		}
		if s.ActiveState == "active" || s.ActiveState == "unknown" {
			fmt.Fprintf(w, "  %s /healthz %s /readyz %s\n", st.dim.Render(s.URL), http(s.Healthz), http(s.Readyz))
		}
		if a := s.Admission; a != nil {
			fmt.Fprintf(w, "  admission active %d/%d (shell %d/%d), queued %d/%d, rejected %d\n",
				a.Active.Total, a.Limits.MaxActive, a.Active.Shell, a.Limits.MaxShell, a.Queued.Total, a.Limits.MaxQueue, a.Counters.Rejected)
			if f := a.Flows; f != nil {
				fmt.Fprintf(w, "  flows %d busy of %d conversations (%d principals)\n", f.Busy, f.Conversations, f.Principals)
				for _, t := range f.Top {
					fmt.Fprintf(w, "    %s %s/%s active %d queued %d refused %d\n", st.dim.Render(t.PrincipalKind), t.Principal[:min(8, len(t.Principal))], t.Conversation[:min(8, len(t.Conversation))], t.Active, t.Queued, t.Refused)
				}
			}
		}
	}
	if r.SystemdErr != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("%s systemd not reachable (%s): unit states, restarts and the rollback timer need it; the HTTP checks below ran without it",
			st.bad.Render("degraded:"), r.SystemdErr)))
	}
	service("production", r.Production)
	for _, b := range r.Beside {
		status := b.Status
		if status == "" {
			status = b.ActiveState
		}
		fmt.Fprintln(w, wrap(fmt.Sprintf("  beside it: %s %s, pid %d", b.Unit, status, b.MainPID)))
	}
	service("canary", r.Canary)
	for _, t := range r.Tunnels {
		// As for the services: one line was ~136 columns.
		unitLine(st.title.Render("tunnel")+" "+t.Name+" "+t.Unit, t.unitView)
		fmt.Fprintf(w, "  %s /healthz %s\n", st.dim.Render(t.URL), http(t.Healthz))
	}
	rb := r.Rollback
	line := rollbackLine(rb, st.bad.Render)
	if r.SystemdErr != "" && rb.State == rollbackNone {
		line = "no cutover pending; whether a timer is armed is unknown (needs systemd)"
	}
	fmt.Fprintln(w, wrap(fmt.Sprintf("%s %s", st.title.Render("rollback"), line)))
	if rb.Err != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.bad.Render("error:"), rb.Err)))
	}
	fmt.Fprintln(w, st.title.Render("recent cutovers and rollbacks"))
	if len(r.Events) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, e := range r.Events {
		outcome := st.ok.Render(e.Outcome)
		if e.Outcome == state.OutcomeFailed || e.Outcome == state.OutcomeRefused {
			outcome = st.bad.Render(e.Outcome)
		}
		line := fmt.Sprintf("  %s %-15s %s", e.Time.Local().Format("2006-01-02 15:04:05"), e.Action, outcome)
		if e.FromVersion != "" || e.ToVersion != "" {
			line += fmt.Sprintf(" %s -> %s", orDash(e.FromVersion), orDash(e.ToVersion))
		}
		if e.Reason != "" {
			line += "  " + st.dim.Render(e.Reason)
		}
		fmt.Fprintln(w, wrap(strings.TrimRight(line, " ")))
	}
	if r.EventsErr != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.bad.Render("error:"), r.EventsErr)))
	}
	fmt.Fprintf(w, "%s %d running\n", st.title.Render("jobs"), len(r.Jobs))
	for _, j := range r.Jobs {
		fmt.Fprintf(w, "  %s %s since %s\n", j.Unit, j.ActiveState, j.Since.UTC().Format(time.RFC3339))
	}
	if r.JobsErr != "" {
		fmt.Fprintf(w, "  %s %s\n", st.bad.Render("error:"), r.JobsErr)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
