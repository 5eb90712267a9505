package status

import (
	"fmt"
	"strings"
	"time"
)

// Line describes a rollback in one line (status and rollback
// status); alarm renders the words that need attention.
func (rb RollbackView) Line(alarm func(...string) string) string {
	switch rb.State {
	case RollbackArmed:
		p := rb.Pending
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, %s left (%s)", alarm("ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, rb.Left, p.TimerUnit)
	case RollbackPendingNotArmed:
		p := rb.Pending
		timer := rb.TimerState
		if timer == "" {
			timer = "not loaded"
		}
		return fmt.Sprintf("%s cutover %s -> %s, snapshot %s, timer %s: a human is needed: run `mcpctl rollback --last` (the boot-time check would restore it at the next boot)",
			alarm("PENDING, NOT ARMED"), p.FromVersion, p.ToVersion, p.SnapshotID, timer)
	case RollbackStrayTimer:
		return fmt.Sprintf("%s timer %s without a pending marker: run `mcpctl rollback disarm`", alarm("ARMED"), rb.TimerState)
	case RollbackMarkerUnreadable:
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

// Line describes production's crash loop in one line (status and
// the watchdog's round): "crash loop: N starts in M s, next try in T";
// alarm renders the words that need attention.
func (cl *CrashLoopView) Line(alarm func(...string) string) string {
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
