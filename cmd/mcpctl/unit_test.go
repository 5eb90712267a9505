package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

// unitTestConfig writes an mcpctl.json with tunnels that can be rendered and
// returns its path; mutate edits the JSON object first.
func unitTestConfig(t testing.TB, dir string, mutate func(map[string]any)) string {
	t.Helper()
	cfg := map[string]any{
		"unitDir": filepath.Join(dir, "units"),
		"install": map[string]any{"root": filepath.Join(dir, "opt")},
		"tunnels": []any{
			map[string]any{"name": "Overdeck", "unit": "mcp-tunnel-overdeck.service", "url": "http://127.0.0.1:18441", "exec": "/usr/bin/socat TCP-LISTEN:18441,fork TCP:127.0.0.1:3210"},
			map[string]any{"name": "overdeck-vm", "unit": "mcp-tunnel-overdeck-vm.service", "url": "http://127.0.0.1:18442", "exec": "/usr/bin/socat TCP-LISTEN:18442,fork TCP:127.0.0.1:3210"},
		},
	}
	if mutate != nil {
		mutate(cfg)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "mcpctl.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnitRender(t *testing.T) {
	dir := t.TempDir()
	conf := unitTestConfig(t, dir, nil)
	code, out, errs := runCLI(t, "--config", conf, "unit", "render", "--mcpctl", "/usr/local/bin/mcpctl", "--canary-version", "v7")
	if code != outcome.OK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"# unit mcp-backend@.service\n", "# unit mcp-backend.slice\n", "# unit mcp-backend-canary.service\n", "# unit mcp-tunnel-overdeck-vm.service\n",
		"# unit mcp-watchdog.timer\n", "# unit mcpctl-pending-rollback.service\n",
		"TasksMax=512\n", "LimitNOFILE=65536\n", "MemoryHigh=6G\n", "MemoryMax=9G\n", "CPUWeight=80\n", "TimeoutStopSec=5\n",
		"ExecStart=" + filepath.Join(dir, "opt", "releases", "v7", "mcp-backend") + " serve --config /etc/mcp-backend/canary.json --listen 127.0.0.1:3211\n",
		"ExecStart=/usr/local/bin/mcpctl --config " + conf + " rollback --if-pending --boot\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "units")); !os.IsNotExist(err) {
		t.Fatalf("render touched unitDir: %v", err)
	}

	t.Run("json", func(t *testing.T) {
		code, out, errs := runCLI(t, "--config", conf, "--json", "unit", "render", "--mcpctl", "/usr/local/bin/mcpctl")
		if code != outcome.OK {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var list []renderedUnit
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if len(list) != 9 || list[0].Name != "mcp-backend.socket" || !list[0].Enable || !strings.Contains(list[0].Content, "ListenStream=") ||
			list[2].Name != "mcp-backend@.service" || !list[2].Enable || !strings.Contains(list[2].Content, "Type=notify") {
			t.Fatalf("json units: %+v", list)
		}
	})

	t.Run("out", func(t *testing.T) {
		outDir := filepath.Join(dir, "rendered")
		code, _, errs := runCLI(t, "--config", conf, "unit", "render", "--out", outDir, "--mcpctl", "/usr/local/bin/mcpctl")
		if code != outcome.OK {
			t.Fatalf("exit %d: %s", code, errs)
		}
		cfg, err := ctlconfig.Load(conf, true)
		if err != nil {
			t.Fatal(err)
		}
		want, err := units.Render(units.Params{Spec: unitSpec(t, cfg), MCPCtl: "/usr/local/bin/mcpctl", MCPCtlConfig: conf})
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(outDir)
		if len(entries) != len(want) {
			t.Fatalf("%d files in --out, want %d", len(entries), len(want))
		}
		for _, u := range want {
			got, err := os.ReadFile(filepath.Join(outDir, u.Name))
			if err != nil || string(got) != string(u.Content) {
				t.Errorf("%s: %v, content differs from units.Render", u.Name, err)
			}
		}
	})
}

// TestUnitInstallTakesTheLock: while another mcpctl holds the state lock
// past --lock-wait, unit install says once whom it waits for, then exits 1
// naming the holder and writes nothing.
func TestUnitInstallTakesTheLock(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	conf := unitTestConfig(t, dir, func(m map[string]any) { m["stateDir"] = stateDir })
	unlock, err := state.Dir(stateDir).Lock("cutover (test holder)")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	code, out, errs := runCLI(t, "--config", conf, "--lock-wait", "200ms", "unit", "install", "--mcpctl", "/usr/local/bin/mcpctl")
	if code != outcome.Failed || !strings.Contains(errs, "nothing written") || !strings.Contains(errs, "cutover (test holder)") ||
		!strings.Contains(errs, "still held after waiting 200ms") {
		t.Fatalf("exit %d, stderr %q; want %d, nothing written, naming the holder", code, errs, outcome.Failed)
	}
	if n := strings.Count(errs, "waiting up to 200ms for the mcpctl lock: pid "+strconv.Itoa(os.Getpid())+" (cutover (test holder))"); n != 1 {
		t.Fatalf("stderr %q says whom it waits for %d times, want once", errs, n)
	}
	if out != "" {
		t.Errorf("stdout %q, want empty", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "units")); !os.IsNotExist(err) {
		t.Fatalf("unitDir after a refused install: %v, want absent", err)
	}
}

func TestUnitBadConfigExit2(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(map[string]any)
		want   string
	}{
		{"cpuWeight", func(m map[string]any) { m["guardrails"] = map[string]any{"cpuWeight": 0} }, "guardrails.cpuWeight = 0: must be 1..10000"},
		{"memoryMax", func(m map[string]any) { m["guardrails"] = map[string]any{"memoryMax": "9GiB"} }, `guardrails.memoryMax = "9GiB": not a size`},
		{"memoryHigh above max", func(m map[string]any) { m["guardrails"] = map[string]any{"memoryHigh": "12G"} }, `guardrails.memoryHigh = "12G": must not be above`},
		{"tunnel without url", func(m map[string]any) { m["tunnels"].([]any)[1].(map[string]any)["url"] = "" }, `tunnels[1].url = ""`},
		{"tunnel without name", func(m map[string]any) { m["tunnels"].([]any)[0].(map[string]any)["name"] = "" }, `tunnels[0].name = ""`},
		{"duplicate units", func(m map[string]any) {
			m["tunnels"].([]any)[1].(map[string]any)["unit"] = "mcp-tunnel-overdeck.service"
		}, `duplicate unit name`},
		{"unknown key", func(m map[string]any) { m["guardrail"] = map[string]any{} }, `unknown key "guardrail"`},
		{"deadline", func(m map[string]any) { m["rollback"] = map[string]any{"deadline": "soon"} }, `rollback.deadline = "soon"`},
	}
	for _, tc := range tests {
		for _, cmd := range [][]string{{"unit", "render", "--out", "OUT"}, {"unit", "install"}} {
			t.Run(tc.name+" "+cmd[1], func(t *testing.T) {
				dir := t.TempDir()
				conf := unitTestConfig(t, dir, tc.mutate)
				args := []string{"--config", conf}
				for _, a := range cmd {
					args = append(args, strings.ReplaceAll(a, "OUT", filepath.Join(dir, "out")))
				}
				code, out, errs := runCLI(t, args...)
				if code != outcome.Usage {
					t.Fatalf("exit %d, want %d; stderr %s", code, outcome.Usage, errs)
				}
				if !strings.Contains(errs, tc.want) {
					t.Fatalf("stderr %q lacks %q", errs, tc.want)
				}
				if out != "" {
					t.Errorf("stdout not empty: %q", out)
				}
				for _, d := range []string{"out", "units"} {
					if _, err := os.Stat(filepath.Join(dir, d)); !os.IsNotExist(err) {
						t.Errorf("%s written despite the bad config (%v)", d, err)
					}
				}
			})
		}
	}
}

func TestUnitMissingExplicitConfig(t *testing.T) {
	code, _, errs := runCLI(t, "--config", filepath.Join(t.TempDir(), "nope.json"), "unit", "render")
	if code != outcome.Usage || !strings.Contains(errs, "nope.json") {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
}

// TestUnitInstallInRealSystemd runs mcpctl unit install inside a real
// systemd, as an operator would: units written, reloaded, enabled; a second
// run changes nothing; a changed guardrail is diffed and reaches systemd.
func TestUnitInstallInRealSystemd(t *testing.T) {
	work := t.TempDir()
	mcpctl := filepath.Join(work, "bin", "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "v-unit-test"), mcpctl)
	conf := unitTestConfig(t, work, func(m map[string]any) { delete(m, "unitDir") })
	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{work}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	install := func() deploy.UnitInstallReport {
		t.Helper()
		out, err := m.Exec(ctx, mcpctl, "--config", conf, "--json", "unit", "install")
		if err != nil {
			t.Fatal(err)
		}
		var rep deploy.UnitInstallReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return rep
	}

	rep := install()
	if len(rep.Changed) != 9 || !rep.Reloaded || rep.UnitDir != "/etc/systemd/system" {
		t.Fatalf("first install: %+v", rep)
	}
	wantEnabled := []string{"mcp-backend.socket", "mcp-backend@.service", "mcp-tunnel-overdeck.service", "mcp-tunnel-overdeck-vm.service", "mcp-watchdog.timer", "mcpctl-pending-rollback.service"}
	if strings.Join(rep.Enabled, " ") != strings.Join(wantEnabled, " ") {
		t.Fatalf("enabled %v, want %v", rep.Enabled, wantEnabled)
	}
	for _, u := range wantEnabled {
		if u == "mcp-backend@.service" {
			u = "mcp-backend@blue.service" // the template's DefaultInstance
		}
		st, err := m.Client.Unit(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if st.LoadState != "loaded" || st.UnitFileState != "enabled" {
			t.Errorf("%s: %s/%s, want loaded/enabled", u, st.LoadState, st.UnitFileState)
		}
	}
	if st, err := m.Client.Unit(ctx, "mcp-watchdog.service"); err != nil || st.LoadState != "loaded" || st.UnitFileState != "static" {
		t.Errorf("watchdog service: %+v %v", st, err)
	}
	// mcpctl in the units is this mcpctl, with the operator's config.
	b, err := os.ReadFile(filepath.Join(m.UnitsDir, "mcpctl-pending-rollback.service"))
	if err != nil || !strings.Contains(string(b), "ExecStart="+mcpctl+" --config "+conf+" rollback --if-pending --boot\n") {
		t.Fatalf("pending-rollback unit: %v\n%s", err, b)
	}

	rep = install()
	if len(rep.Changed) != 0 || rep.Reloaded || len(rep.Unchanged) != 9 {
		t.Fatalf("second install changed something: %+v", rep)
	}

	unitTestConfig(t, work, func(m map[string]any) {
		delete(m, "unitDir")
		m["guardrails"] = map[string]any{"tasksMax": 256}
	})
	out, err := m.Exec(ctx, mcpctl, "--config", conf, "--no-color", "unit", "install")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"updated mcp-backend@.service\n", "updated mcp-backend.slice\n", "-TasksMax=512\n", "+TasksMax=256\n", "2 unit(s) written"} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	st, err := m.Client.Unit(ctx, "mcp-backend@blue.service")
	if err != nil || st.TasksMax != 256 {
		t.Fatalf("TasksMax after install = %d (%v), want 256: not reloaded?", st.TasksMax, err)
	}
}

// unitSpec is cfg's unit spec; the test fails when cfg cannot be rendered.
func unitSpec(t testing.TB, cfg *ctlconfig.Config) *units.Spec {
	t.Helper()
	spec, err := cfg.UnitSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestUnitInstallDryRun: the diff of every unit and the plan, before
// anything is written (before, the diff came only after writing); no
// systemd needed, nothing written, even with the lock held elsewhere.
func TestUnitInstallDryRun(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	conf := unitTestConfig(t, dir, func(m map[string]any) { m["stateDir"] = stateDir })
	code, out, errs := runCLI(t, "--config", conf, "unit", "install", "--mcpctl", "/usr/local/bin/mcpctl", "--dry-run")
	if code != 0 || !strings.Contains(out, "would create mcp-backend@.service") || !strings.Contains(out, "+ExecStart=") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "units")); !os.IsNotExist(err) {
		t.Fatalf("unitDir after a dry run: %v, want absent", err)
	}
	code, out, _ = runCLI(t, "--config", conf, "unit", "install", "--dry-run", "--mcpctl", "/usr/local/bin/mcpctl", "--json")
	var rep deploy.UnitInstallReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.DryRun || len(rep.Changed) == 0 || rep.Reloaded {
		t.Fatalf("--json: exit %d %s", code, out)
	}
	if len(rep.LinkedSlots) != 0 || len(rep.Disabled) != 0 {
		t.Fatalf("a fresh host: would link %v and disable %v, want neither", rep.LinkedSlots, rep.Disabled)
	}
}

// TestUnitInstallDryRunOverTheSingleUnit: on a host installed before the
// slots, the dry run names the slot links and the single unit it would
// disable, and creates neither.
func TestUnitInstallDryRunOverTheSingleUnit(t *testing.T) {
	dir := t.TempDir()
	conf := unitTestConfig(t, dir, nil)
	opt := filepath.Join(dir, "opt")
	for _, p := range []string{filepath.Join(opt, "releases", "v1"), filepath.Join(dir, "units")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("releases/v1", filepath.Join(opt, "current")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "units", "mcp-backend.service"), []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "--config", conf, "unit", "install", "--mcpctl", "/usr/local/bin/mcpctl", "--dry-run")
	for _, want := range []string{"would link the slots to the current release: blue green", "would disable at boot, if enabled (it serves until the next cutover hands it off): mcp-backend.service", "nothing was changed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("exit %d, want %q:\n%s%s", code, want, out, errs)
		}
	}
	if _, err := os.Lstat(filepath.Join(opt, "slots")); !os.IsNotExist(err) {
		t.Fatalf("slot links after a dry run: %v, want none", err)
	}
}
