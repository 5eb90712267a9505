package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/stress"
	"github.com/overdeck/mcp-backend/stress/stresstest"
)

// stressConfigFile writes an mcpctl.json whose stateDir is a temp dir.
func stressConfigFile(t testing.TB) (path, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	stateDir = filepath.Join(dir, "state")
	b, _ := json.Marshal(map[string]any{"stateDir": stateDir})
	path = filepath.Join(dir, "mcpctl.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, stateDir
}

// quick are flags for a short attack on a fake backend.
var quick = []string{"--production", "", "--duration", "1s", "--rate", "100", "--shell-sleep", "300ms"}

func TestStressCommandUsage(t *testing.T) {
	cfg, _ := stressConfigFile(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad profile", []string{"--profile", "flood", "--target", "http://127.0.0.1:1"}, "--profile"},
		{"remote target", []string{"--target", "http://192.0.2.1:3211"}, "loopback"},
		{"production as target", []string{"--target", "http://localhost:3210"}, "never production"},
		{"bad mix", []string{"--target", "http://127.0.0.1:1", "--mix", "1:2"}, "--mix"},
		{"rate too high", []string{"--target", "http://127.0.0.1:1", "--rate", "1e6"}, "--rate"},
		{"argument", []string{"--target", "http://127.0.0.1:1", "extra"}, "unexpected argument"},
		{"pid and unit", []string{"--target", "http://127.0.0.1:1", "--pid", "1", "--unit", "x.service"}, "exclude"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, append([]string{"--config", cfg, "stress"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, tc.want)
			}
		})
	}
}

func TestStressCommandUnreachableTarget(t *testing.T) {
	cfg, _ := stressConfigFile(t)
	code, _, errOut := runCLI(t, "--config", cfg, "stress", "--target", "http://127.0.0.1:1", "--production", "")
	if code != exitFailed || !strings.Contains(errOut, "limits") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the limits it could not read", code, errOut)
	}
}

func TestStressCommandVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("attacks fake backends")
	}
	tests := []struct {
		name string
		opts stresstest.Options
		code int
		fail string
	}{
		{"honest backend passes", stresstest.Options{}, exitOK, ""},
		{"backend that understates its shells fails", stresstest.Options{RealShell: 8, LieShell: true,
			Limits: stress.Limits{MaxActive: 16, ReservedControl: 2, MaxNonControl: 14, MaxShell: 4, MaxQueue: 8, QueueWaitMs: 2000}},
			exitFailed, "shell.bound.measured"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := stressConfigFile(t)
			srv := stresstest.Start(t, tc.opts)
			code, out, errOut := runCLI(t, append([]string{"--config", cfg, "--json", "stress", "--target", srv.URL}, quick...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s\n%s", code, tc.code, errOut, out)
			}
			var rep stress.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("stdout is not the JSON report: %v\n%s", err, out)
			}
			if rep.Pass != (tc.code == exitOK) {
				t.Fatalf("report pass %t with exit %d", rep.Pass, code)
			}
			if tc.fail != "" && !strings.Contains(errOut, tc.fail) {
				t.Fatalf("stderr %q does not name %s", errOut, tc.fail)
			}
		})
	}
}

// fakeUnit stands in for the systemd unit: the test process itself.
type fakeUnit struct{}

func (fakeUnit) Sample(ctx context.Context) (stress.UnitSample, error) {
	s, err := (&stress.ProcSampler{PID: os.Getpid()}).Sample(ctx)
	s.InvocationID = "test-invocation"
	return s, err
}

func TestStressCommandRecordsAndWritesFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("attacks a fake backend")
	}
	old := stressUnitSampler
	t.Cleanup(func() { stressUnitSampler = old })
	stressUnitSampler = func(context.Context, string) (stress.UnitSampler, uint64, func(), error) {
		return fakeUnit{}, 0, func() {}, nil
	}
	cfg, stateDir := stressConfigFile(t)
	srv := stresstest.Start(t, stresstest.Options{})
	dir := t.TempDir()
	results, plotFile := filepath.Join(dir, "results.bin"), filepath.Join(dir, "plot.html")
	args := append([]string{"--config", cfg, "--no-color", "stress", "--target", srv.URL, "--unit", "fake.service",
		"--memory-growth", "10", "--results", results, "--plot", plotFile}, quick...)
	code, out, errOut := runCLI(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %s\n%s", code, errOut, out)
	}
	for _, want := range []string{"verdict: PASS", "recorded for sha256:", "unit.stable", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("--no-color output has ANSI escapes")
	}
	vs, err := state.Verdicts(stateDir)
	if err != nil || len(vs) != 1 {
		t.Fatalf("verdicts %v, %v; want one", vs, err)
	}
	if v := vs[0]; v.Kind != state.KindStress || !v.Pass || !strings.HasPrefix(v.Digest, "sha256:") {
		t.Fatalf("verdict %+v", v)
	}
	want, _ := stress.ExeDigest(uint32(os.Getpid()))
	if vs[0].Digest != want {
		t.Fatalf("digest %s, want the running executable's %s", vs[0].Digest, want)
	}

	f, err := os.Open(results)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := vegeta.DecoderFor(f) // what `vegeta report` uses
	if dec == nil {
		t.Fatal("--results is in no format vegeta recognises")
	}
	n := 0
	for {
		var r vegeta.Result
		if dec.Decode(&r) != nil {
			break
		}
		n++
	}
	if n == 0 {
		t.Fatal("--results holds no vegeta results")
	}
	html, err := os.ReadFile(plotFile)
	if err != nil || !strings.Contains(string(html), "<html") {
		t.Fatalf("--plot did not write an HTML plot: %v", err)
	}
}

func TestStressCgroupMemory(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		t.Skip("no cgroup filesystem here")
	}
	if n := stressCgroupMemory(uint32(os.Getpid())); n == 0 {
		t.Fatal("no memory read for this process's cgroup")
	}
	if n := stressCgroupMemory(0); n != 0 {
		t.Fatalf("pid 0: %d, want 0", n)
	}
}
