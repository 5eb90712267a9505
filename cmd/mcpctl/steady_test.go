package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/jsoncheck"
	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/stress"
)

// steadyConfigFile writes an mcpctl.json whose tunnels have the given URLs.
func steadyConfigFile(t testing.TB, urls ...string) string {
	t.Helper()
	dir := t.TempDir()
	var tunnels []map[string]any
	for i, u := range urls {
		tunnels = append(tunnels, map[string]any{"name": "t" + string(rune('a'+i)), "unit": "t" + string(rune('a'+i)) + ".service", "url": u})
	}
	b, _ := json.Marshal(map[string]any{"stateDir": filepath.Join(dir, "state"), "tunnels": tunnels,
		"backend": map[string]any{"config": filepath.Join(dir, "config.json")}})
	path := filepath.Join(dir, "mcpctl.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSteadyCommandUsage(t *testing.T) {
	cfg := steadyConfigFile(t, "https://overdeck.example.com")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"host that is no tunnel", []string{"--target", "http://192.0.2.1:3211"}, "must be a loopback URL or one of the tunnels' url"},
		{"not a URL", []string{"--target", "127.0.0.1:1"}, "loopback URL"},
		{"rate too high", []string{"--target", "http://127.0.0.1:1", "--rate", "1e6"}, "rate"},
		{"several targets outside steady", []string{"--profile", "overload", "--target", "http://127.0.0.1:1", "--target", "http://127.0.0.1:2"}, "only the steady profile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", cfg, "stress"}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--profile") {
				args = append(args, "--profile", "steady")
			}
			code, _, errOut := runCLI(t, args...)
			if code != outcome.Usage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, outcome.Usage, tc.want)
			}
		})
	}
}

// TestSteadyCommandThroughDeadTunnels: without --target the steady load
// runs through every configured tunnel; a tunnel whose port is closed
// counts transport failures, exit 1, and the JSON names each target.
func TestSteadyCommandThroughDeadTunnels(t *testing.T) {
	a, b := "http://"+proctest.FreeAddr(t), "http://"+proctest.FreeAddr(t)
	cfg := steadyConfigFile(t, a, b)
	code, out, errOut := runCLI(t, "--config", cfg, "--json", "stress", "--profile", "steady", "--duration", "1s", "--rate", "20")
	if code != outcome.Failed || !strings.Contains(errOut, "transport failures") {
		t.Fatalf("exit %d, stderr %q; want %d naming transport failures", code, errOut, outcome.Failed)
	}
	var rep stress.SteadyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Target != a || rep.Targets[1].Target != b {
		t.Fatalf("targets %+v, want the two tunnels", rep.Targets)
	}
	if rep.Total.Calls == 0 || rep.Total.Transport != rep.Total.Calls || rep.Total.OK != 0 || rep.Pass {
		t.Fatalf("total %+v pass %v: want every call a transport failure, no pass", rep.Total, rep.Pass)
	}
	// The verdict field is there (before, steady JSON had none), durations
	// are milliseconds.
	if !strings.Contains(out, `"pass": false`) {
		t.Fatalf("no pass field:\n%s", out)
	}
	if bad, err := jsoncheck.Durations([]byte(out)); err != nil || len(bad) > 0 {
		t.Fatalf("durations: %v %v", bad, err)
	}
}

// TestSteadyTableFits80: the steady table fits 80 columns by default (107
// before) and keeps its long headers with --wide.
func TestSteadyTableFits80(t *testing.T) {
	c := stress.SteadyCounts{Target: "http://127.0.0.1:18441", Calls: 12000, OK: 11990, Tool: 10, Wait: stress.Latency{P50Ms: 301, P99Ms: 920, MaxMs: 5012}}
	rep := &stress.SteadyReport{Rate: 40, Duration: millis.Duration(3 * time.Minute), Targets: []stress.SteadyCounts{c, c}, Total: c}
	rep.Total.Target = "all"
	var narrow, wide bytes.Buffer
	printSteady(&narrow, rep, textWidth)
	printSteady(&wide, rep, 0)
	for _, line := range strings.Split(narrow.String(), "\n") {
		if len(line) > textWidth {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
	}
	if !strings.Contains(wide.String(), "wait p50 ms") || !strings.Contains(narrow.String(), "127.0.0.1:18441") {
		t.Errorf("narrow:\n%s\nwide:\n%s", narrow.String(), wide.String())
	}
}

// TestSteadyInterruptedGivesCounts: Ctrl-C during a steady run prints the
// counts so far, marked, and exits 1 (before: "context canceled" only).
func TestSteadyInterruptedGivesCounts(t *testing.T) {
	a, b := "http://"+proctest.FreeAddr(t), "http://"+proctest.FreeAddr(t)
	cfg := steadyConfigFile(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	d := &deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		logger: slog.New(slog.NewTextHandler(&errb, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	code := runApp(ctx, newApp(d), []string{"mcpctl", "--config", cfg, "stress", "--profile", "steady", "--duration", "30s", "--rate", "20", "--json"}, &errb)
	var rep stress.SteadyReport
	if code != outcome.Failed || json.Unmarshal(out.Bytes(), &rep) != nil || !rep.Interrupted || rep.Pass || rep.Total.Calls == 0 {
		t.Fatalf("exit %d, report %+v\nstdout %s\nstderr %s", code, rep, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "steady interrupted") {
		t.Fatalf("stderr %s", errb.String())
	}
}
