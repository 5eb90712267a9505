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
}
