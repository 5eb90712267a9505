package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
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

// promHandWritten are the sections of /metrics whose Prometheus names are
// written by hand below (admission) and by writeSessionsPrometheus; every
// other section, present or added later, is written by writePromGeneric.
var promHandWritten = map[string]bool{"limits": true, "active": true, "queued": true, "peak": true, "counters": true, "sessions": true, "flows": true, "sandbox": true}

// writePrometheus renders the /metrics snapshot in the Prometheus text
// format: the admission figures with their labels, every numeric field of
// the other sections (memory, intake, ...) as mcp_<section>_<field>, and
// mcp_build_info. The sessions follow (writeSessionsPrometheus).
func writePrometheus(w io.Writer, snap metricsJSON) {
	writeAdmissionPrometheus(w, snap.Metrics)
	b, err := json.Marshal(snap)
	var doc map[string]any
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		err = d.Decode(&doc)
	}
	if err == nil {
		writePromGeneric(w, doc)
	}
	writeSandboxPrometheus(w, snap.Sandbox)
	writeBuildInfo(w)
}

// writeSandboxPrometheus writes sandbox.calls with the profile as a label:
// custom profile names are not metric names.
func writeSandboxPrometheus(w io.Writer, m mcpwire.SandboxMetrics) {
	const name = "mcp_sandbox_calls_total"
	fmt.Fprintf(w, "# HELP %s /metrics sandbox.calls: shell commands started per sandbox profile.\n# TYPE %s counter\n", name, name)
	for _, p := range slices.Sorted(maps.Keys(m.Calls)) {
		fmt.Fprintf(w, "%s{profile=%q} %d\n", name, p, m.Calls[p])
	}
}

// writePromGeneric writes every numeric (and boolean, as 0/1) leaf of the
// sections of doc not written by hand, as a gauge named by its path:
// intake.bodyBytesHeld is mcp_intake_body_bytes_held, a fooMs field
// mcp_..._foo_seconds. Array elements carry
// an index label. A field added to /metrics reaches Prometheus this way
// without anyone writing it down.
func writePromGeneric(w io.Writer, doc map[string]any) {
	for _, sec := range slices.Sorted(maps.Keys(doc)) {
		if promHandWritten[sec] {
			continue
		}
		promLeaves(w, "mcp_"+promSnake(sec), sec, "", doc[sec])
	}
}

func promLeaves(w io.Writer, name, path, labels string, v any) {
	sample := func(val string) {
		fmt.Fprintf(w, "# HELP %s /metrics %s.\n# TYPE %s gauge\n%s%s %s\n", name, path, name, name, labels, val)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			v := x[k]
			// Prometheus names carry base units: fooMs is foo_seconds.
			n := name + "_" + promSnake(k)
			if base, ok := strings.CutSuffix(k, "Ms"); ok {
				n = name + "_" + promSnake(base) + "_seconds"
				if num, isNum := v.(json.Number); isNum {
					if f, err := num.Float64(); err == nil {
						v = json.Number(strconv.FormatFloat(f/1000, 'g', -1, 64))
					}
				}
			}
			promLeaves(w, n, path+"."+k, labels, v)
		}
	case []any:
		for i, e := range x {
			l := fmt.Sprintf(`index="%d"`, i)
			if labels != "" {
				l = strings.TrimSuffix(labels[1:], "}") + "," + l
			}
			promLeaves(w, name, path, "{"+l+"}", e)
		}
	case json.Number:
		sample(x.String())
	case bool:
		if x {
			sample("1")
		} else {
			sample("0")
		}
	}
}

// promSnake turns a JSON key (bodyBytesHeld) into a metric name part
// (body_bytes_held).
func promSnake(k string) string {
	var b strings.Builder
	for i, r := range k {
		switch {
		case unicode.IsUpper(r):
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// writeBuildInfo is the build as a constant gauge, as Prometheus exporters
// do: what version, revision and Go version this process runs.
func writeBuildInfo(w io.Writer) {
	i := buildinfo.Read()
	q := strconv.Quote
	fmt.Fprintf(w, "# HELP mcp_build_info The running build: version, VCS revision and time, Go version.\n# TYPE mcp_build_info gauge\n")
	fmt.Fprintf(w, "mcp_build_info{version=%s,revision=%s,vcs_time=%s,modified=%s,goversion=%s} 1\n",
		q(i.Version), q(i.Revision), q(i.Time), q(strconv.FormatBool(i.Modified)), q(i.GoVersion))
}

// writeAdmissionPrometheus writes the admission snapshot.
func writeAdmissionPrometheus(w io.Writer, s mcpwire.Metrics) {
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
	g("mcp_admission_running", "Running tool operations, all classes.", s.Active.Total)
	g("mcp_admission_waiting", "Queued tool operations, all classes.", s.Queued.Total)
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

// writeSessionsPrometheus appends the cancellation scope's state to the
// Prometheus text of /metrics.
func writeSessionsPrometheus(w io.Writer, st SessionStats) {
	fmt.Fprintf(w, "# HELP mcp_sessions_issued_total Session ids issued at initialize.\n# TYPE mcp_sessions_issued_total counter\nmcp_sessions_issued_total %d\n", st.Issued)
	fmt.Fprintf(w, "# HELP mcp_sessions_inflight Calls a cancel notification can reach.\n# TYPE mcp_sessions_inflight gauge\nmcp_sessions_inflight %d\n", st.InFlight)
	fmt.Fprintf(w, "# HELP mcp_sessions_cancel_notifications_total notifications/cancelled received over HTTP with a session id.\n# TYPE mcp_sessions_cancel_notifications_total counter\nmcp_sessions_cancel_notifications_total %d\n", st.CancelNotices)
	fmt.Fprintf(w, "# HELP mcp_sessions_cancels_delivered_total Cancel notifications that cancelled a call.\n# TYPE mcp_sessions_cancels_delivered_total counter\nmcp_sessions_cancels_delivered_total %d\n", st.CancelDelivered)
	fmt.Fprintf(w, "# HELP mcp_sessions_early_cancels Cancels held for a call not yet arrived.\n# TYPE mcp_sessions_early_cancels gauge\nmcp_sessions_early_cancels %d\n", st.EarlyCancels)
	fmt.Fprintf(w, "# HELP mcp_sessions_inflight_cap Most calls tracked for cancellation.\n# TYPE mcp_sessions_inflight_cap gauge\nmcp_sessions_inflight_cap %d\n", st.InFlightCap)
	fmt.Fprintf(w, "# HELP mcp_sessions_untracked_total Calls not tracked for cancellation (the cap was reached).\n# TYPE mcp_sessions_untracked_total counter\nmcp_sessions_untracked_total %d\n", st.Untracked)
	fmt.Fprintf(w, "# HELP mcp_sessions_early_cancel_cap Most cancels held for calls not yet arrived.\n# TYPE mcp_sessions_early_cancel_cap gauge\nmcp_sessions_early_cancel_cap %d\n", st.EarlyCancelCap)
	fmt.Fprintf(w, "# HELP mcp_sessions_early_cancel_ttl_seconds How long an early cancel is held.\n# TYPE mcp_sessions_early_cancel_ttl_seconds gauge\nmcp_sessions_early_cancel_ttl_seconds %g\n", float64(st.EarlyCancelTTL)/1000)
	fmt.Fprintf(w, "# HELP mcp_sessions_early_cancels_dropped_total Early cancels dropped (cap or age).\n# TYPE mcp_sessions_early_cancels_dropped_total counter\nmcp_sessions_early_cancels_dropped_total %d\n", st.EarlyDropped)
}
