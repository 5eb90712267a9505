package admission

import "github.com/overdeck/mcp-backend/mcpwire"

// Snapshot is the /metrics JSON. It reads the state without taking the
// scheduler's lock; each number is exact, the set is a moment's view.
func (c *Controller) Snapshot() mcpwire.Metrics {
	// completed before accepted: every completion follows its acceptance,
	// so the view never shows more completed than accepted.
	completed := c.completed.Load()
	st := c.state.Load()
	qc, qn := int64(field(st, shQControl)), int64(field(st, shQNormal))
	total, nonControl := int64(field(st, shTotal)), int64(field(st, shNonControl))
	return mcpwire.Metrics{
		Limits: mcpwire.Limits{
			MaxActive:       c.lim.MaxActive,
			ReservedControl: c.lim.ReservedControl,
			MaxNonControl:   c.lim.MaxNonControl(),
			MaxShell:        c.lim.MaxShell,
			MaxQueue:        c.lim.MaxQueue,
			QueueWaitMs:     c.lim.QueueWait.Milliseconds(),
		},
		Active: mcpwire.Active{
			Total:      total,
			Control:    total - nonControl,
			NonControl: nonControl,
			Shell:      int64(field(st, shShell)),
		},
		Queued: mcpwire.Queued{Total: qc + qn, Control: qc, NonControl: qn},
		Peak: mcpwire.Peak{
			Active:     c.peakActive.Load(),
			NonControl: c.peakNonControl.Load(),
			Shell:      c.peakShell.Load(),
			Queued:     c.peakQueued.Load(),
		},
		Counters: mcpwire.Counters{
			Accepted:  c.accepted.Load(),
			Completed: completed,
			Rejected:  c.rejected.Load(),
			TimedOut:  c.timedOut.Load(),
			Cancelled: c.cancelled.Load(),
			Preempted: c.preempted.Load(),
		},
	}
}
