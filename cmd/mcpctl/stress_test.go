package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/outcome"
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

// notAboutLatency lifts the control p99 bound out of reach: these tests judge
// bounds and verdicts, and a loaded machine must not fail them (latency goals
// are measured by benchmarks and reported by real stress runs).
var notAboutLatency = []string{"--control-p99", "1h"}

// quick are flags for a short attack on a fake backend.
var quick = append([]string{"--production", "", "--duration", "1s", "--rate", "100", "--shell-sleep", "300ms"}, notAboutLatency...)

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
			if code != outcome.Usage || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, outcome.Usage, tc.want)
			}
		})
	}
}

func TestStressCommandUnreachableTarget(t *testing.T) {
	cfg, _ := stressConfigFile(t)
	code, _, errOut := runCLI(t, "--config", cfg, "stress", "--target", "http://127.0.0.1:1", "--production", "")
	if code != outcome.Failed || !strings.Contains(errOut, "limits") {
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
		{"honest backend passes", stresstest.Options{}, outcome.OK, ""},
		{"backend that understates its shells fails", stresstest.Options{RealShell: 8, LieShell: true,
			Limits: mcpwire.Limits{MaxActive: 16, ReservedControl: 2, MaxNonControl: 14, MaxShell: 4, MaxQueue: 8, QueueWaitMs: 2000}},
			outcome.Failed, "shell.bound.measured"},
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
			if rep.Pass != (tc.code == outcome.OK) {
				t.Fatalf("report pass %t with exit %d", rep.Pass, code)
			}
			if tc.fail != "" && !strings.Contains(errOut, tc.fail) {
				t.Fatalf("stderr %q does not name %s", errOut, tc.fail)
			}
		})
	}
}

// serving fronts a fake backend started with JSONResponse with a proxy that
// adds backend.version and backend.build to system.info results (the fake's
// own say nothing of a build), so that the stress can check which build it
// attacked. Every call still reaches the fake's admission.
func serving(t testing.TB, base, build string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Header.Get("X-Test-Tool") != "system.info" || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var msg map[string]any
		if err := json.Unmarshal(body, &msg); err != nil {
			return fmt.Errorf("system.info answer is not JSON (start the fake with JSONResponse): %w", err)
		}
		if res, ok := msg["result"].(map[string]any); ok && res["isError"] != true {
			info := map[string]any{"ok": true, "backend": map[string]any{"version": "v-test", "build": build}}
			text, _ := json.Marshal(info)
			res["structuredContent"] = info
			res["content"] = []any{map[string]any{"type": "text", "text": string(text)}}
		}
		body, _ = json.Marshal(msg)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/mcp" {
			body, _ := io.ReadAll(r.Body)
			var req struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &req) == nil && req.Method == "tools/call" {
				r.Header.Set("X-Test-Tool", req.Params.Name)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStressVerdictOnlyForTheStressedBuild: the verdict is recorded for the
// unit's build only when the target serves that build, and a run that
// skipped a premise check is never recorded as a pass.
func TestStressVerdictOnlyForTheStressedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("attacks a fake backend")
	}
	self, err := stress.ExeDigest(uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name     string
		serves   string
		rate     string
		code     int
		want     string // in stdout+stderr
		verdicts int
		pass     bool
	}{
		{"target serves another build: nothing recorded", other, "100", outcome.Failed, "a build that was not stressed", 0, false},
		{"shell load never above the limit: recorded as not passing", self, "2", outcome.OK, "recorded as NOT passing: the run skipped shell.reaches.limit", 1, false},
		{"the stressed build, load above the limit: a pass", self, "100", outcome.OK, "recorded for " + self, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, stateDir := stressConfigFile(t)
			target := serving(t, stresstest.Start(t, stresstest.Options{JSONResponse: true}).URL, tc.serves)
			args := []string{"--config", cfg, "--no-color", "stress", "--target", target, "--unit", "fake.service", "--memory-growth", "10",
				"--production", "", "--duration", "1s", "--rate", tc.rate, "--shell-sleep", "300ms"}
			args = append(args, notAboutLatency...)
			code, out, errOut := runStressCLI(t, fakeUnitSampler, args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d, want %d and %q\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
			vs, err := state.Dir(stateDir).Verdicts()
			if err != nil || len(vs) != tc.verdicts {
				t.Fatalf("%d verdicts (%v), want %d", len(vs), err, tc.verdicts)
			}
			if _, stressOK, err := state.Dir(stateDir).PassingFor(self); err != nil || stressOK != tc.pass {
				t.Fatalf("stress passing for the build = %v (%v), want %v", stressOK, err, tc.pass)
			}
		})
	}
}

// runStressCLI runs mcpctl with sampler standing in for D-Bus.
func runStressCLI(t testing.TB, sampler stressSamplerFunc, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	d := &deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, stressSampler: sampler,
		logger: slog.New(slog.NewTextHandler(&errb, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	code := runApp(context.Background(), newApp(d), append([]string{"mcpctl"}, args...), &errb)
	return code, out.String(), errb.String()
}

func fakeUnitSampler(context.Context, string) (stress.UnitSampler, uint64, func(), error) {
	return fakeUnit{}, 0, func() {}, nil
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
	cfg, stateDir := stressConfigFile(t)
	srv := stresstest.Start(t, stresstest.Options{JSONResponse: true})
	self, _ := stress.ExeDigest(uint32(os.Getpid()))
	target := serving(t, srv.URL, self)
	dir := t.TempDir()
	results, plotFile := filepath.Join(dir, "results.bin"), filepath.Join(dir, "plot.html")
	args := append([]string{"--config", cfg, "--no-color", "stress", "--target", target, "--unit", "fake.service",
		"--memory-growth", "10", "--results", results, "--plot", plotFile}, quick...)
	code, out, errOut := runStressCLI(t, fakeUnitSampler, args...)
	if code != outcome.OK {
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
	vs, err := state.Dir(stateDir).Verdicts()
	if err != nil || len(vs) != 1 {
		t.Fatalf("verdicts %v, %v; want one", vs, err)
	}
	if v := vs[0]; v.Kind != state.KindStress || !v.Pass || !strings.HasPrefix(v.Digest, "sha256:") || v.Version != "v-test" || !strings.HasPrefix(v.Summary, "profile overload,") {
		t.Fatalf("verdict %+v, want a passing stress verdict naming version v-test and the profile", v)
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

// TestStressInRealSystemd runs `mcpctl stress` inside a real systemd (as an
// operator would, through nsenter) against a canary unit, with production
// running beside it: every default comes from mcpctl.json, the unit is
// sampled over D-Bus, the verdict is recorded for the running build's
// digest; and a canary restarted mid-attack fails unit.stable.
func TestStressInRealSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	work := t.TempDir()
	backend := filepath.Join(work, "bin", "mcp-backend")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v-stress-1"), backend)
	mcpctl := filepath.Join(work, "bin", "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "stress-it"), mcpctl)
	canaryAddr, prodAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	etc := filepath.Join(work, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	small := `"concurrency":{"maxActive":12,"reservedControl":2,"maxShell":4,"maxQueue":8,"queueWaitMs":2000}`
	files := map[string]string{
		filepath.Join(etc, "canary.json"): fmt.Sprintf(`{"listen":%q,%s}`, canaryAddr, small),
		filepath.Join(etc, "config.json"): fmt.Sprintf(`{"listen":%q}`, prodAddr),
		filepath.Join(etc, "mcpctl.json"): fmt.Sprintf(`{"backend":{"unit":"mcp-backend.service","listen":%q,"config":%q},
			"canary":{"unit":"mcp-backend-canary.service","listen":%q,"config":%q},"stateDir":%q}`,
			prodAddr, filepath.Join(etc, "config.json"), canaryAddr, filepath.Join(etc, "canary.json"), filepath.Join(work, "state")),
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{work}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for unit, cfg := range map[string]string{"mcp-backend.service": "config.json", "mcp-backend-canary.service": "canary.json"} {
		u := fmt.Sprintf("[Service]\nType=notify\nExecStart=%s serve --config %s\nRestart=on-failure\n", backend, filepath.Join(etc, cfg))
		if err := os.WriteFile(filepath.Join(m.UnitsDir, unit), []byte(u), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"mcp-backend.service", "mcp-backend-canary.service"} {
		if err := m.Client.Start(ctx, u); err != nil {
			t.Fatalf("start %s: %v", u, err)
		}
	}
	prodBefore, err := m.Client.Unit(ctx, "mcp-backend.service")
	if err != nil {
		t.Fatal(err)
	}
	stressRun := func(t *testing.T, extra ...string) (stress.Report, error) {
		t.Helper()
		args := append([]string{mcpctl, "--config", filepath.Join(etc, "mcpctl.json"), "--json", "stress",
			"--duration", "2s", "--rate", "80", "--shell-sleep", "300ms"}, notAboutLatency...)
		args = append(args, extra...)
		out, err := m.Exec(ctx, args...)
		var rep stress.Report
		if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
			t.Fatalf("mcpctl stress printed no JSON report (%v): %v\n%s", err, jerr, out)
		}
		return rep, err
	}

	t.Run("canary passes with faults, production untouched", func(t *testing.T) {
		rep, err := stressRun(t, "--faults")
		if err != nil || !rep.Pass {
			var b strings.Builder
			_ = rep.Render(&b, false)
			t.Fatalf("stress failed: %v\n%s\nexamples: %v", err, b.String(), rep.Examples)
		}
		if rep.UnitSamples == nil || rep.UnitSamples.Name != "mcp-backend-canary.service" || rep.UnitSamples.First.MainPID == 0 {
			t.Fatalf("canary unit not sampled: %+v", rep.UnitSamples)
		}
		if p := rep.ProdHealthz; p == nil || p.Samples == 0 || p.Failures != 0 {
			t.Fatalf("production /healthz not sampled cleanly: %+v", p)
		}
		want, err := buildinfo.FileDigest(backend)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Build == nil || !rep.Build.Recorded || rep.Build.Digest != want || rep.Build.Version != "v-stress-1" {
			t.Fatalf("build %+v, want recorded for %s version v-stress-1", rep.Build, want)
		}
		if _, stressOK, err := state.Dir(filepath.Join(work, "state")).PassingFor(want); err != nil || !stressOK {
			t.Fatalf("no passing stress verdict for %s: %v", want, err)
		}
		prodAfter, err := m.Client.Unit(ctx, "mcp-backend.service")
		if err != nil {
			t.Fatal(err)
		}
		if prodAfter.MainPID != prodBefore.MainPID || prodAfter.InvocationID != prodBefore.InvocationID {
			t.Fatalf("production changed: %d/%s -> %d/%s", prodBefore.MainPID, prodBefore.InvocationID, prodAfter.MainPID, prodAfter.InvocationID)
		}
	})

	t.Run("canary restarted mid-attack fails unit.stable", func(t *testing.T) {
		// Restart once the attack is under way (the canary admitted calls).
		restarted := make(chan error, 1)
		go func() {
			c := stress.NewClient("http://"+canaryAddr, time.Second)
			m0, err := c.Metrics(ctx)
			if err != nil {
				restarted <- err
				return
			}
			for ctx.Err() == nil {
				if m1, err := c.Metrics(ctx); err == nil && m1.Counters.Accepted > m0.Counters.Accepted+10 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			restarted <- m.Client.Restart(ctx, "mcp-backend-canary.service")
		}()
		rep, err := stressRun(t, "--duration", "4s")
		if rerr := <-restarted; rerr != nil {
			t.Fatalf("restart the canary: %v", rerr)
		}
		if err == nil || rep.Pass {
			t.Fatalf("stress passed across a restart (err %v)", err)
		}
		for _, c := range rep.Checks {
			if c.Name == "unit.stable" && c.Status != stress.Fail {
				t.Fatalf("unit.stable = %s (%s), want FAIL", c.Status, c.Detail)
			}
		}
	})
}
