package view

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/textwrap"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
)

// Status writes the status screen; lines fit width columns (0: as
// wide as they need), the time a unit is active since on its own line.
func Status(w io.Writer, st Styles, r *status.Report, width int) {
	wrap := func(s string) string { return textwrap.Wrap(s, width, "    ") }
	up := func(s string) string {
		if s == "active" {
			return st.OK.Render(s)
		}
		return st.Bad.Render(s)
	}
	http := func(c int) string {
		switch c {
		case 200:
			return st.OK.Render("200")
		case 0:
			return st.Bad.Render("no answer")
		}
		return st.Bad.Render(fmt.Sprint(c))
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
			fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.Bad.Render("error:"), u.Err)))
		}
	}
	service := func(title string, s status.ServiceView) {
		unitLine(st.Title.Render(title)+" "+s.Unit, s.UnitView)
		if s.Version != "" {
			fmt.Fprintf(w, "  version %s %s\n", s.Version, st.Dim.Render("("+s.VersionFrom+")"))
		}
		if s.ActiveState == "active" || s.ActiveState == "unknown" {
			fmt.Fprintf(w, "  %s /healthz %s /readyz %s\n", st.Dim.Render(s.URL), http(s.Healthz), http(s.Readyz))
		}
		if a := s.Admission; a != nil {
			fmt.Fprintf(w, "  admission active %d/%d (shell %d/%d), queued %d/%d, rejected %d\n",
				a.Active.Total, a.Limits.MaxActive, a.Active.Shell, a.Limits.MaxShell, a.Queued.Total, a.Limits.MaxQueue, a.Counters.Rejected)
			if f := a.Flows; f != nil {
				fmt.Fprintf(w, "  flows %d busy of %d conversations (%d principals)\n", f.Busy, f.Conversations, f.Principals)
				for _, t := range f.Top {
					fmt.Fprintf(w, "    %s %s/%s active %d queued %d refused %d\n", st.Dim.Render(t.PrincipalKind), t.Principal[:min(8, len(t.Principal))], t.Conversation[:min(8, len(t.Conversation))], t.Active, t.Queued, t.Refused)
				}
			}
		}
	}
	if r.SystemdErr != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("%s systemd not reachable (%s): unit states, restarts and the rollback timer need it; the HTTP checks below ran without it",
			st.Bad.Render("degraded:"), r.SystemdErr)))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, wrap(st.Bad.Render("warning:")+" "+warn))
	}
	service("production", r.Production)
	if cl := r.CrashLoop; cl != nil {
		fmt.Fprintln(w, wrap("  crash loop: "+cl.Line(st.Bad.Render)))
	}
	for _, b := range r.Beside {
		slot := b.Status
		if slot == "" {
			slot = b.ActiveState
		}
		fmt.Fprintln(w, wrap(fmt.Sprintf("  beside it: %s %s, pid %d", b.Unit, slot, b.MainPID)))
	}
	service("canary", r.Canary)
	for _, t := range r.Tunnels {
		// As for the services: one line was ~136 columns.
		unitLine(st.Title.Render("tunnel")+" "+t.Name+" "+t.Unit, t.UnitView)
		fmt.Fprintf(w, "  %s /healthz %s\n", st.Dim.Render(t.URL), http(t.Healthz))
	}
	rb := r.Rollback
	line := rb.Line(st.Bad.Render)
	if r.SystemdErr != "" && rb.State == status.RollbackNone {
		line = "no cutover pending; whether a timer is armed is unknown (needs systemd)"
	}
	fmt.Fprintln(w, wrap(fmt.Sprintf("%s %s", st.Title.Render("rollback"), line)))
	if rb.Err != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.Bad.Render("error:"), rb.Err)))
	}
	fmt.Fprintln(w, st.Title.Render("recent cutovers and rollbacks"))
	if len(r.Events) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, e := range r.Events {
		outcome := st.OK.Render(e.Outcome)
		if e.Outcome == state.OutcomeFailed || e.Outcome == state.OutcomeRefused {
			outcome = st.Bad.Render(e.Outcome)
		}
		line := fmt.Sprintf("  %s %-15s %s", e.Time.Local().Format("2006-01-02 15:04:05"), e.Action, outcome)
		if e.FromVersion != "" || e.ToVersion != "" {
			line += fmt.Sprintf(" %s -> %s", orDash(e.FromVersion), orDash(e.ToVersion))
		}
		if e.Reason != "" {
			line += "  " + st.Dim.Render(e.Reason)
		}
		fmt.Fprintln(w, wrap(strings.TrimRight(line, " ")))
	}
	if r.EventsErr != "" {
		fmt.Fprintln(w, wrap(fmt.Sprintf("  %s %s", st.Bad.Render("error:"), r.EventsErr)))
	}
	fmt.Fprintf(w, "%s %d running\n", st.Title.Render("jobs"), len(r.Jobs))
	for _, j := range r.Jobs {
		fmt.Fprintf(w, "  %s %s since %s\n", j.Unit, j.ActiveState, j.Since.UTC().Format(time.RFC3339))
	}
	if r.JobsErr != "" {
		fmt.Fprintf(w, "  %s %s\n", st.Bad.Render("error:"), r.JobsErr)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
