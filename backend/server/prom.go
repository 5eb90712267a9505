package server

import (
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// wantsText reports whether Accept asks for text/plain (Prometheus) rather
// than JSON, which stays the default.
func wantsText(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "text/plain", "application/openmetrics-text":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// writePrometheus renders the snapshot in the Prometheus text format.
func writePrometheus(w io.Writer, s mcpwire.Metrics) {
	g := func(name, help string, v int64, labels ...string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		if len(labels) == 0 {
			fmt.Fprintf(w, "%s %d\n", name, v)
		}
	}
	lab := func(name string, v int64, kv string) { fmt.Fprintf(w, "%s{%s} %d\n", name, kv, v) }
	fmt.Fprintf(w, "# HELP mcp_admission_limit Configured admission limits.\n# TYPE mcp_admission_limit gauge\n")
	lab("mcp_admission_limit", int64(s.Limits.MaxActive), `limit="maxActive"`)
	lab("mcp_admission_limit", int64(s.Limits.ReservedControl), `limit="reservedControl"`)
	lab("mcp_admission_limit", int64(s.Limits.MaxNonControl), `limit="maxNonControl"`)
	lab("mcp_admission_limit", int64(s.Limits.MaxShell), `limit="maxShell"`)
	lab("mcp_admission_limit", int64(s.Limits.MaxQueue), `limit="maxQueue"`)
	lab("mcp_admission_limit", s.Limits.QueueWaitMs, `limit="queueWaitMs"`)
	g("mcp_admission_active", "Running tool operations by class.", 0, "class")
	lab("mcp_admission_active", s.Active.Control, `class="control"`)
	lab("mcp_admission_active", s.Active.NonControl, `class="nonControl"`)
	lab("mcp_admission_active", s.Active.Shell, `class="shell"`)
	g("mcp_admission_queued", "Queued tool operations by class.", 0, "class")
	lab("mcp_admission_queued", s.Queued.Control, `class="control"`)
	lab("mcp_admission_queued", s.Queued.NonControl, `class="nonControl"`)
	g("mcp_admission_peak", "High-water marks since start.", 0, "of")
	lab("mcp_admission_peak", s.Peak.Active, `of="active"`)
	lab("mcp_admission_peak", s.Peak.NonControl, `of="nonControl"`)
	lab("mcp_admission_peak", s.Peak.Shell, `of="shell"`)
	lab("mcp_admission_peak", s.Peak.Queued, `of="queued"`)
	fmt.Fprintf(w, "# HELP mcp_admission_operations_total Tool operations by admission outcome.\n# TYPE mcp_admission_operations_total counter\n")
	lab("mcp_admission_operations_total", s.Counters.Accepted, `outcome="accepted"`)
	lab("mcp_admission_operations_total", s.Counters.Completed, `outcome="completed"`)
	lab("mcp_admission_operations_total", s.Counters.Rejected, `outcome="rejected"`)
	lab("mcp_admission_operations_total", s.Counters.TimedOut, `outcome="timedOut"`)
	lab("mcp_admission_operations_total", s.Counters.Cancelled, `outcome="cancelled"`)
	fmt.Fprintf(w, "# HELP mcp_admission_preempted_total Queued non-control operations refused to make room for control ones (also counted rejected).\n# TYPE mcp_admission_preempted_total counter\nmcp_admission_preempted_total %d\n", s.Counters.Preempted)
	fmt.Fprintf(w, "# HELP mcp_admission_displaced_total Queued operations refused to give their place to a caller holding fewer (fair share; also counted rejected).\n# TYPE mcp_admission_displaced_total counter\nmcp_admission_displaced_total %d\n", s.Counters.Displaced)
	if f := s.Flows; f != nil {
		writeFlowsPrometheus(w, f)
	}
}

// writeFlowsPrometheus renders the fair-share state. Cardinality is
// bounded: totals, and at most mcpwire.TopFlows labelled series per gauge
// (hashes only, never ids).
func writeFlowsPrometheus(w io.Writer, f *mcpwire.Flows) {
	fmt.Fprintf(w, "# HELP mcp_flows Fair-share flows tracked, by level, and conversations with work running or queued.\n# TYPE mcp_flows gauge\n")
	fmt.Fprintf(w, "mcp_flows{level=\"principal\"} %d\nmcp_flows{level=\"conversation\"} %d\nmcp_flows{level=\"busy\"} %d\nmcp_flows{level=\"cap\"} %d\n", f.Principals, f.Conversations, f.Busy, f.Cap)
	fmt.Fprintf(w, "# HELP mcp_flows_overflowed_total Flows that found the table full and share a bucket.\n# TYPE mcp_flows_overflowed_total counter\nmcp_flows_overflowed_total %d\n", f.Overflowed)
	fmt.Fprintf(w, "# HELP mcp_flows_reserve Slots per class no flow may fill alone.\n# TYPE mcp_flows_reserve gauge\nmcp_flows_reserve %d\n", f.Reserve)
	for _, m := range []struct {
		name, help string
		v          func(mcpwire.FlowStat) string
	}{
		{"mcp_flow_top_active", "Running operations of the busiest conversations.", func(s mcpwire.FlowStat) string { return fmt.Sprint(s.Active) }},
		{"mcp_flow_top_queued", "Queued operations of the busiest conversations.", func(s mcpwire.FlowStat) string { return fmt.Sprint(s.Queued) }},
		{"mcp_flow_top_refused", "Refusals of the busiest conversations since they were tracked.", func(s mcpwire.FlowStat) string { return fmt.Sprint(s.Refused) }},
		{"mcp_flow_top_served_seconds", "Slot-seconds held by the busiest conversations since they were tracked.", func(s mcpwire.FlowStat) string { return fmt.Sprintf("%g", s.ServedSeconds) }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", m.name, m.help, m.name)
		for i, s := range f.Top {
			fmt.Fprintf(w, "%s{rank=\"%d\",principal_kind=%q,principal=%q,conversation=%q} %s\n", m.name, i+1, s.PrincipalKind, s.Principal, s.Conversation, m.v(s))
		}
	}
}
