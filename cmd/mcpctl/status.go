package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/textwrap"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/systemd"
)

func statusCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "one screen: production, canary, tunnels, an armed rollback, the last cutovers and rollbacks",
		Action: func(c *cli.Context) error {
			b, err := connectOpsDegraded(c, false, d.logger)
			if err != nil {
				return err
			}
			var sd status.UnitReader = noSystemd{b.sdErr}
			if b.sd != nil {
				defer b.sd.Close()
				sd = b.sd
			}
			rep := status.Gather(c.Context, b.cfg, sd, b.verify, time.Now())
			if b.sdErr != nil {
				rep.SystemdErr = b.sdErr.Error()
			}
			d.out.print(rep, func(w io.Writer, st styles) { renderStatus(w, st, rep, d.out.width()) })
			return nil
		},
	}
}

// The real client is what status reads units through.
var _ status.UnitReader = (*systemd.Client)(nil)

// rollbackLine describes a rollback in one line (status and rollback
// status); alarm renders the words that need attention.
func rollbackLine(rb status.RollbackView, alarm func(...string) string) string {
	switch rb.State {
	case status.RollbackArmed:
		p := rb.Pending
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, %s left (%s)", alarm("ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, rb.Left, p.TimerUnit)
	case status.RollbackPendingNotArmed:
		p := rb.Pending
		timer := rb.TimerState
		if timer == "" {
			timer = "not loaded"
		}
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, timer %s: a human is needed: run `mcpctl rollback --last` (the boot-time check would restore it at the next boot)",
			alarm("PENDING, NOT ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, timer)
	case status.RollbackStrayTimer:
		return fmt.Sprintf("%s timer %s without a pending marker: run `mcpctl rollback disarm`", alarm("ARMED"), rb.TimerState)
	case status.RollbackMarkerUnreadable:
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

// crashLoopLine describes production's crash loop in one line (status and
// the watchdog's round): "crash loop: N starts in M s, next try in T";
// alarm renders the words that need attention.
func crashLoopLine(cl *status.CrashLoopView, alarm func(...string) string) string {
	head := fmt.Sprintf("%d starts in %s", cl.Starts, fmtSeconds(cl.Window.D()))
	if !cl.Down {
		line := head + ", recovered"
		if !cl.Recovered.IsZero() {
			line += " at " + cl.Recovered.Local().Format("2006-01-02 15:04:05")
		}
		return fmt.Sprintf("%s after %d attempt(s) of the watchdog", line, cl.Attempts)
	}
	var failed []string
	for _, f := range cl.Failed {
		s := f.Unit + " failed"
		if f.Result != "" {
			s += " (" + f.Result + ")"
		}
		failed = append(failed, s)
	}
	next := "in the watchdog's next round (every 30 s)"
	if cl.NextIn > 0 {
		next = "in " + cl.NextIn.D().String()
	}
	line := head + ", next try " + next + ": " + alarm("DOWN") + ", " + strings.Join(failed, ", ")
	if cl.Attempts > 0 {
		line += fmt.Sprintf("; attempt %d %s", cl.Attempts, cl.LastOutcome)
		if cl.LastError != "" {
			line += ": " + cl.LastError
		}
	}
	return line + "; or run `mcpctl recover` now"
}

// fmtSeconds is d in whole seconds ("75 s").
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
}

// renderStatus writes the status screen; lines fit width columns (0: as
// wide as they need), the time a unit is active since on its own line.
func renderStatus(w io.Writer, st styles, r *status.Report, width int) {
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
	since := func(u status.UnitView) string {
		if u.Since.IsZero() {
			return ""
		}
		return fmt.Sprintf("since %s (%s)", u.Since.Local().Format("2006-01-02 15:04:05"), r.Time.Sub(u.Since).Round(time.Second))
	}
	unitLine := func(head string, u status.UnitView) {
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
	service := func(title string, s status.ServiceView) {
		unitLine(st.title.Render(title)+" "+s.Unit, s.UnitView)
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
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, wrap(st.bad.Render("warning:")+" "+warn))
	}
	service("production", r.Production)
	if cl := r.CrashLoop; cl != nil {
		fmt.Fprintln(w, wrap("  crash loop: "+crashLoopLine(cl, st.bad.Render)))
	}
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
		unitLine(st.title.Render("tunnel")+" "+t.Name+" "+t.Unit, t.UnitView)
		fmt.Fprintf(w, "  %s /healthz %s\n", st.dim.Render(t.URL), http(t.Healthz))
	}
	rb := r.Rollback
	line := rollbackLine(rb, st.bad.Render)
	if r.SystemdErr != "" && rb.State == status.RollbackNone {
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
