package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
)

// promHandNames is where each field of the hand-written sections of
// /metrics appears in the Prometheus text. A field added to one of these
// sections and not written there fails TestPrometheusCarriesEveryField.
var promHandNames = map[string]string{
	"sandbox.calls.none":           `mcp_sandbox_calls_total{profile="none"}`,
	"sandbox.calls.root":           `mcp_sandbox_calls_total{profile="root"}`,
	"limits.maxActive":             `mcp_admission_limit{limit="maxActive"}`,
	"limits.reservedControl":       `mcp_admission_limit{limit="reservedControl"}`,
	"limits.maxNonControl":         `mcp_admission_limit{limit="maxNonControl"}`,
	"limits.maxShell":              `mcp_admission_limit{limit="maxShell"}`,
	"limits.maxQueue":              `mcp_admission_limit{limit="maxQueue"}`,
	"limits.queueWaitMs":           `mcp_admission_limit{limit="queueWaitMs"}`,
	"active.total":                 "mcp_admission_running",
	"active.control":               `mcp_admission_active{class="control"}`,
	"active.nonControl":            `mcp_admission_active{class="nonControl"}`,
	"active.shell":                 `mcp_admission_active{class="shell"}`,
	"queued.total":                 "mcp_admission_waiting",
	"queued.control":               `mcp_admission_queued{class="control"}`,
	"queued.nonControl":            `mcp_admission_queued{class="nonControl"}`,
	"peak.active":                  `mcp_admission_peak{of="active"}`,
	"peak.nonControl":              `mcp_admission_peak{of="nonControl"}`,
	"peak.shell":                   `mcp_admission_peak{of="shell"}`,
	"peak.queued":                  `mcp_admission_peak{of="queued"}`,
	"counters.accepted":            `mcp_admission_operations_total{outcome="accepted"}`,
	"counters.completed":           `mcp_admission_operations_total{outcome="completed"}`,
	"counters.rejected":            `mcp_admission_operations_total{outcome="rejected"}`,
	"counters.timedOut":            `mcp_admission_operations_total{outcome="timedOut"}`,
	"counters.cancelled":           `mcp_admission_operations_total{outcome="cancelled"}`,
	"counters.preempted":           "mcp_admission_preempted_total",
	"counters.displaced":           "mcp_admission_displaced_total",
	"flows.principals":             `mcp_flows{level="principal"}`,
	"flows.conversations":          `mcp_flows{level="conversation"}`,
	"flows.busy":                   `mcp_flows{level="busy"}`,
	"flows.cap":                    `mcp_flows{level="cap"}`,
	"flows.overflowed":             "mcp_flows_overflowed_total",
	"flows.reserve":                "mcp_flows_reserve",
	"sessions.issued":              "mcp_sessions_issued_total",
	"sessions.inFlight":            "mcp_sessions_inflight",
	"sessions.inFlightCap":         "mcp_sessions_inflight_cap",
	"sessions.untracked":           "mcp_sessions_untracked_total",
	"sessions.cancelNotifications": "mcp_sessions_cancel_notifications_total",
	"sessions.cancelsDelivered":    "mcp_sessions_cancels_delivered_total",
	"sessions.earlyCancels":        "mcp_sessions_early_cancels",
	"sessions.earlyCancelCap":      "mcp_sessions_early_cancel_cap",
	"sessions.earlyCancelTtlMs":    "mcp_sessions_early_cancel_ttl_seconds",
	"sessions.earlyCancelsDropped": "mcp_sessions_early_cancels_dropped_total",
}

// numericLeaves lists the numeric and boolean fields of a JSON document by
// path (intake.bodyBytesHeld; array elements as path[i]).
func numericLeaves(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			numericLeaves(p, e, out)
		}
	case []any:
		for i, e := range x {
			numericLeaves(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	case json.Number:
		out[prefix] = x.String()
	case bool:
		out[prefix] = map[bool]string{true: "1", false: "0"}[x]
	}
}

// promSampleName is where a generic field appears: the path in snake case
// (fooMs as foo_seconds), array indexes as labels.
func promSampleName(path string) string {
	name, labels := "mcp", []string{}
	for _, part := range strings.Split(path, ".") {
		key, idx, isElem := strings.Cut(part, "[")
		if base, ok := strings.CutSuffix(key, "Ms"); ok {
			key = base + "Seconds"
		}
		name += "_" + promSnake(key)
		if isElem {
			labels = append(labels, fmt.Sprintf(`index="%s"`, strings.TrimSuffix(idx, "]")))
		}
	}
	if len(labels) > 0 {
		name += "{" + strings.Join(labels, ",") + "}"
	}
	return name
}

func promSamples(t testing.TB, text []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			t.Fatalf("bad sample line %q", l)
		}
		out[l[:i]] = l[i+1:]
	}
	return out
}

func fetch(t testing.TB, url, accept string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s (%s): %d %v", url, accept, resp.StatusCode, err)
	}
	return b
}

// TestPrometheusCarriesEveryField: every numeric field of the JSON
// /metrics, in whichever section (memory, intake, sessions, or one added
// later), is a sample of the Prometheus text, with the same value where the
// value cannot move between the two reads. Before, the memory.* and
// intake.* figures and five sessions figures were missing.
func TestPrometheusCarriesEveryField(t *testing.T) {
	b := startBackend(t, nil)
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(fetch(t, b.url+"/metrics", "application/json")))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	text := fetch(t, b.url+"/metrics", "text/plain")
	samples := promSamples(t, text)
	leaves := map[string]string{}
	numericLeaves("", doc, leaves)
	if len(leaves) < 40 {
		t.Fatalf("only %d numeric fields in /metrics: the walk is broken", len(leaves))
	}
	for path, val := range leaves {
		sec, _, _ := strings.Cut(path, ".")
		if rest, ok := strings.CutPrefix(path, "flows.top["); ok {
			// The busiest flows: one series per rank, labelled.
			_, field, _ := strings.Cut(rest, "].")
			if !hasSamplePrefix(samples, "mcp_flow_top_"+promSnake(field)+"{rank=") {
				t.Errorf("/metrics %s: no mcp_flow_top_%s series", path, promSnake(field))
			}
			continue
		}
		name, hand := promHandNames[path]
		if !hand {
			if promHandWritten[sec] {
				t.Errorf("/metrics %s (section %s, written by hand) has no Prometheus sample: add it to the writer and to promHandNames", path, sec)
				continue
			}
			name = promSampleName(path)
		}
		got, ok := samples[name]
		switch {
		case !ok:
			t.Errorf("/metrics %s = %s: no Prometheus sample %s", path, val, name)
		case sec == "limits" && got != val, path == "sessions.earlyCancelTtlMs" && got != strings.TrimSuffix(val, "000"):
			t.Errorf("/metrics %s = %s, Prometheus %s = %s", path, val, name, got)
		}
	}
	if !bytes.Contains(text, []byte("mcp_build_info{version=")) {
		t.Error("no mcp_build_info gauge")
	}
	// The text is valid exposition format, when promtool is installed.
	if p, err := exec.LookPath("promtool"); err == nil {
		c := exec.Command(p, "check", "metrics")
		c.Stdin = bytes.NewReader(text)
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}

func hasSamplePrefix(samples map[string]string, prefix string) bool {
	for k := range samples {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// TestPromSnake pins the generic names.
func TestPromSnake(t *testing.T) {
	for in, want := range map[string]string{"bodyBytesHeld": "body_bytes_held", "earlyCancelTtlMs": "early_cancel_ttl_ms", "memory": "memory", "maxConns": "max_conns"} {
		if got := promSnake(in); got != want {
			t.Errorf("promSnake(%q) = %q, want %q", in, got, want)
		}
	}
}

// readmeMetricsFields are the fields the README's /metrics table names
// (a row "`limits.maxActive`, `.maxShell`" names limits.maxActive and
// limits.maxShell; "`flows.*`" everything under flows).
func readmeMetricsFields(t testing.TB) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- metrics-fields -->")
	table, _, ok2 := strings.Cut(rest, "<!-- /metrics-fields -->")
	if !ok || !ok2 {
		t.Fatal("docs/metrics.md has no <!-- metrics-fields --> table")
	}
	out := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "`") {
			continue
		}
		sec := ""
		for _, f := range strings.Split(cells[1], ",") {
			f = strings.Trim(strings.TrimSpace(f), "`")
			if strings.HasPrefix(f, ".") {
				f = sec + f
			} else {
				sec, _, _ = strings.Cut(f, ".")
			}
			out[f] = true
		}
	}
	return out
}

// jsonLeaves lists every leaf of a JSON document by path.
func jsonLeaves(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			jsonLeaves(p, e, out)
		}
	case []any:
		out[prefix] = true
	default:
		out[prefix] = true
	}
}

// TestREADMEMetricsTable: the README's /metrics table names every field of
// the JSON, and nothing it does not have. Before, preempted, maxNonControl,
// bodyBytesPeak and untracked were nowhere in the README.
func TestREADMEMetricsTable(t *testing.T) {
	// A runtime directory, as a production slot has: the service's
	// figures are there too.
	t.Setenv("RUNTIME_DIRECTORY", t.TempDir())
	b := startBackend(t, nil)
	var doc map[string]any
	if err := json.Unmarshal(fetch(t, b.url+"/metrics", "application/json"), &doc); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	jsonLeaves("", doc, have)
	documented := readmeMetricsFields(t)
	covered := func(path string) bool {
		if documented[path] {
			return true
		}
		for d := range documented {
			if p, ok := strings.CutSuffix(d, ".*"); ok && strings.HasPrefix(path, p+".") {
				return true
			}
		}
		return false
	}
	for path := range have {
		if !covered(path) {
			t.Errorf("/metrics field %s is not in the README's table", path)
		}
	}
	for path := range documented {
		// memory.error appears only when sampling fails.
		if !have[path] && !strings.HasSuffix(path, ".*") && path != "memory.error" {
			t.Errorf("the README's table names %s, which /metrics does not have", path)
		}
	}
}

// TestProbesAndHosts: /healthz and /readyz answer any Host; /metrics
// answers loopback without the token and an allowedHosts name (a tunnel)
// only with the operator's token, as the README says; a malformed Host is
// 400.
func TestProbesAndHosts(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	secret := strings.Repeat("k", 24)
	if err := os.WriteFile(tok, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, func(c *config.Config) {
		c.AllowedHosts = []string{"mcp.example.com"}
		c.Auth.BearerTokenFile = tok
	})
	for _, tc := range []struct {
		path, host, token string
		want              int
	}{
		{"/healthz", "evil.example", "", 200},
		{"/readyz", "evil.example", "", 200},
		{"/metrics", "evil.example", "", 403},
		{"/metrics", "evil.example", secret, 403},
		{"/metrics", "mcp.example.com", "", 401},
		{"/metrics", "mcp.example.com:443", "wrong-token-0123456789abcd", 401},
		{"/metrics", "mcp.example.com", secret, 200},
		{"/metrics", "MCP.example.com.:8443", secret, 200},
		{"/metrics", "127.0.0.1", "", 200},
		{"/metrics", "localhost:3210", "", 200},
		{"/metrics", "[::1]:1", "", 200},
		{"/metrics", "127.0.0.1:65536", "", 400},
		{"/metrics", "127.0.0.1:0", "", 400},
		{"/metrics", "127.0.0.1:x", "", 400},
		{"/metrics", "127.0.0.1:" + strings.Repeat("9", 300), "", 400},
	} {
		req, _ := http.NewRequest(http.MethodGet, b.url+tc.path, nil)
		req.Host = tc.host
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if got := statusOf(t, req); got != tc.want {
			t.Errorf("GET %s Host %s token %t: %d, want %d", tc.path, tc.host, tc.token != "", got, tc.want)
		}
	}
}
