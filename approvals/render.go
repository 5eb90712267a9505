package approvals

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// What mcpctl approvals prints for the operator: the listing, one
// approval in full, the outcome of a decision and a watch event.

// RenderList lists approvals for the operator: a line of facts, then the
// whole call (command, env, cwd, every other argument) and each part of a
// command with the rule that judged it, indented below it. width bounds
// every line (0: --wide, nothing cut); a cut says so.
func RenderList(w io.Writer, rs []Record, now time.Time, width int) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no approvals")
		return
	}
	line := func(s string) { fmt.Fprintln(w, Fit(s, width)) }
	line(fmt.Sprintf("%-17s  %-8s  %5s  %-11s  %s", "ID", "STATUS", "AGE", "TOOL", "RULE / WHO"))
	for _, r := range rs {
		status := r.Status
		if r.Grant != nil && r.Grant.Live {
			status = "granted"
		}
		line(fmt.Sprintf("%-17s  %-8s  %5s  %-11s  %s", r.ID, status, Age(now.Sub(r.CreatedAt)), r.Tool,
			Visible(r.Rule+" / "+r.PrincipalKind+":"+r.Principal, false)))
		if r.Grant != nil && r.Grant.Live {
			line(fmt.Sprintf("    grant: runs without asking until %s (%s left; mcpctl approvals revoke %s)", r.Grant.Until.Format(time.RFC3339), Age(r.Grant.Until.Sub(now)), r.ID))
		}
		for _, l := range ViewOf(r.Tool, r.Arguments, r.Parts).Lines(width - 4) {
			line("    " + l)
		}
	}
}

// Age is a duration in its largest unit: 12s, 5m, 3h, 131d.
func Age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Render shows one approval in full: nothing of the call is cut.
func Render(w io.Writer, r Record) {
	fmt.Fprintf(w, "approval %s: %s\n", r.ID, r.Status)
	fmt.Fprintf(w, "  tool:      %s\n", r.Tool)
	fmt.Fprintf(w, "  rule:      %s (%s)\n  asked of:  %s\n", Visible(r.Rule, false), Visible(r.Reason, false), Visible(r.Target, false))
	fmt.Fprintf(w, "  who:       %s:%s, conversation %s\n", r.PrincipalKind, Visible(r.Principal, false), r.Conversation)
	fmt.Fprintf(w, "  created:   %s\n  expires:   %s\n", r.CreatedAt.Format(time.RFC3339), r.ExpiresAt.Format(time.RFC3339))
	if r.DecidedAt != nil {
		fmt.Fprintf(w, "  decided:   %s by %s\n", r.DecidedAt.Format(time.RFC3339), r.DecidedBy)
	}
	if r.Grant != nil {
		fmt.Fprintf(w, "  grant:     until %s", r.Grant.Until.Format(time.RFC3339))
		switch {
		case r.Grant.RevokedAt != nil:
			fmt.Fprintf(w, ", revoked %s by %s", r.Grant.RevokedAt.Format(time.RFC3339), r.Grant.RevokedBy)
		case r.Grant.Live:
			fmt.Fprint(w, ", live")
		default:
			fmt.Fprint(w, ", ended")
		}
		fmt.Fprintln(w)
	}
	if r.JobID != "" {
		fmt.Fprintf(w, "  job:       %s\n", r.JobID)
	}
	fmt.Fprintln(w, "the whole call, as it will run:")
	for _, l := range strings.Split(ViewOf(r.Tool, r.Arguments, r.Parts).Text(0), "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// RenderDecision says what a decision did (approve says which): a grant,
// an approval for one run, or a denial.
func RenderDecision(w io.Writer, r Record, approve bool) {
	if r.Grant != nil {
		fmt.Fprintf(w, "granted %s: %s, exactly this call from %s:%s, runs without asking until %s (mcpctl approvals revoke %s ends it)\n",
			r.ID, r.Tool, r.PrincipalKind, Visible(r.Principal, false), r.Grant.Until.Format(time.RFC3339), r.ID)
	} else if approve {
		fmt.Fprintf(w, "approved %s: %s will run once when the client sends it again\n", r.ID, r.Tool)
	} else {
		fmt.Fprintf(w, "denied %s: %s will be refused\n", r.ID, r.Tool)
	}
}

// WatchLine is one event for the operator: when, what, which approval,
// the call (cut, visibly) and what to run next.
func WatchLine(ev Event) string {
	r := ev.Record
	head := fmt.Sprintf("%s  %-8s  %s  %s  %s:%s  rule %s", ev.At.Format(time.RFC3339), ev.Event, r.ID, r.Tool,
		r.PrincipalKind, Visible(r.Principal, false), Visible(r.Rule, false))
	var tail string
	switch ev.Event {
	case EventPending:
		tail = fmt.Sprintf("until %s: mcpctl approvals approve %s (or deny, show)", r.ExpiresAt.Format(time.RFC3339), r.ID)
	case EventGranted:
		tail = fmt.Sprintf("runs without asking until %s", r.Grant.Until.Format(time.RFC3339))
	case EventApproved, EventDenied:
		tail = "by " + r.DecidedBy
	case EventRan:
		if r.JobID != "" {
			tail = "as job " + r.JobID
		}
	}
	out := head
	for _, l := range ViewOf(r.Tool, r.Arguments, nil).Lines(76) {
		out += "\n    " + l
	}
	if tail != "" {
		out += "\n    " + tail
	}
	return out
}
