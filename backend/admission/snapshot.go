package admission

// Snapshot is the /metrics JSON of DESIGN.md §3. Field names are a contract.
type Snapshot struct {
	Limits   LimitsJSON `json:"limits"`
	Active   Active     `json:"active"`
	Queued   Queued     `json:"queued"`
	Peak     Peak       `json:"peak"`
	Counters Counters   `json:"counters"`
}

// LimitsJSON are the configured limits as reported.
type LimitsJSON struct {
	MaxActive       int   `json:"maxActive"`
	ReservedControl int   `json:"reservedControl"`
	MaxNonControl   int   `json:"maxNonControl"`
	MaxShell        int   `json:"maxShell"`
	MaxQueue        int   `json:"maxQueue"`
	QueueWaitMs     int64 `json:"queueWaitMs"`
}

// Active are the running operations.
type Active struct {
	Total      int64 `json:"total"`
	Control    int64 `json:"control"`
	NonControl int64 `json:"nonControl"`
	Shell      int64 `json:"shell"`
}

// Queued are the waiting operations.
type Queued struct {
	Total      int64 `json:"total"`
	Control    int64 `json:"control"`
	NonControl int64 `json:"nonControl"`
}

// Peak are the high-water marks since start.
type Peak struct {
	Active     int64 `json:"active"`
	NonControl int64 `json:"nonControl"`
	Shell      int64 `json:"shell"`
	Queued     int64 `json:"queued"`
}

// Counters count outcomes since start. accepted: got a slot; completed:
// released it; rejected: queue full; timedOut: queue wait expired;
// cancelled: cancelled while queued. preempted: the part of rejected that
// was queued and gave its place to a control operation.
type Counters struct {
	Accepted  int64 `json:"accepted"`
	Completed int64 `json:"completed"`
	Rejected  int64 `json:"rejected"`
	TimedOut  int64 `json:"timedOut"`
	Cancelled int64 `json:"cancelled"`
	Preempted int64 `json:"preempted"`
}

// Snapshot reads the state without taking the scheduler's lock; each number
// is exact, the set is a moment's view.
func (c *Controller) Snapshot() Snapshot {
	// completed before accepted: every completion follows its acceptance,
	// so the view never shows more completed than accepted.
	completed := c.completed.Load()
	st := c.state.Load()
	qc, qn := int64(field(st, shQControl)), int64(field(st, shQNormal))
	total, nonControl := int64(field(st, shTotal)), int64(field(st, shNonControl))
	return Snapshot{
		Limits: LimitsJSON{
			MaxActive:       c.lim.MaxActive,
			ReservedControl: c.lim.ReservedControl,
			MaxNonControl:   c.lim.MaxNonControl(),
			MaxShell:        c.lim.MaxShell,
			MaxQueue:        c.lim.MaxQueue,
			QueueWaitMs:     c.lim.QueueWait.Milliseconds(),
		},
		Active: Active{
			Total:      total,
			Control:    total - nonControl,
			NonControl: nonControl,
			Shell:      int64(field(st, shShell)),
		},
		Queued: Queued{Total: qc + qn, Control: qc, NonControl: qn},
		Peak: Peak{
			Active:     c.peakActive.Load(),
			NonControl: c.peakNonControl.Load(),
			Shell:      c.peakShell.Load(),
			Queued:     c.peakQueued.Load(),
		},
		Counters: Counters{
			Accepted:  c.accepted.Load(),
			Completed: completed,
			Rejected:  c.rejected.Load(),
			TimedOut:  c.timedOut.Load(),
			Cancelled: c.cancelled.Load(),
			Preempted: c.preempted.Load(),
		},
	}
}
