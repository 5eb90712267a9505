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

// Gauges is the snapshot without the flows: each number exact, the set a
// moment's view. It takes the lock briefly (the hot path counts under it);
// /readyz, which must not wait on the dispatcher, reads Occupancy.
func (c *Controller) Gauges() mcpwire.Metrics {
	c.mu.Lock()
	completed, accepted := c.completed, c.accepted
	peak := mcpwire.Peak{Active: c.peakActive, NonControl: c.peakNonControl, Shell: c.peakShell, Queued: c.peakQueued}
	st := c.state.Load()
	svc := c.serviceMetrics(st)
	c.mu.Unlock()
	// A waiter counts itself after its grant and before its release:
	// read after completed, so the view never shows more completed than
	// accepted.
	accepted += c.acceptedQueued.Load()
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
		Queued:  mcpwire.Queued{Total: qc + qn, Control: qc, NonControl: qn},
		Peak:    peak,
		Service: svc,
		Counters: mcpwire.Counters{
			Accepted:  accepted,
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
