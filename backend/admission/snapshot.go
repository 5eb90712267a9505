package admission

import (
	"cmp"
	"slices"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Snapshot is the /metrics JSON: the gauges and counters, and the flows
// (read under the lock, bounded by the table's cap).
func (c *Controller) Snapshot() mcpwire.Metrics {
	m := c.Gauges()
	m.Flows = c.flowStats()
	return m
}

// Gauges is the snapshot without the flows. It reads the state without
// taking the scheduler's lock (what /readyz needs, at any rate); each number
// is exact, the set is a moment's view.
func (c *Controller) Gauges() mcpwire.Metrics {
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
			Displaced: c.displaced.Load(),
		},
	}
}

// flowStats reads the flow table under the lock: bounded work (the table
// is capped), and /metrics is not a hot path.
func (c *Controller) flowStats() *mcpwire.Flows {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	out := &mcpwire.Flows{Principals: len(c.flows.principals), Conversations: c.flows.nconv, Cap: c.lim.MaxFlows,
		Overflowed: c.flows.overflowed, Reserve: c.lim.FlowReserve, Top: []mcpwire.FlowStat{}}
	for pk, p := range c.flows.principals {
		for ck, conv := range p.convs {
			d := conv.busy()
			if d > 0 {
				out.Busy++
			}
			if d == 0 && conv.refusedTotal == 0 {
				continue
			}
			st := mcpwire.FlowStat{PrincipalKind: principalKind(pk), Principal: principalName(pk), Conversation: ck,
				Active: conv.running(), Queued: conv.queued[poolControl] + conv.queued[poolNonControl], Refused: conv.refusedTotal, ServedSeconds: conv.servedNow(now)}
			out.Top = append(out.Top, st)
		}
	}
	slices.SortFunc(out.Top, func(a, b mcpwire.FlowStat) int {
		if d := (b.Active + b.Queued) - (a.Active + a.Queued); d != 0 {
			return d
		}
		return cmp.Compare(b.Refused, a.Refused)
	})
	if len(out.Top) > mcpwire.TopFlows {
		out.Top = out.Top[:mcpwire.TopFlows]
	}
	return out
}
