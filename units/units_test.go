package units_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/internal/golden"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// goldenConfig is the default config with the tunnels filled in.
func goldenConfig(t testing.TB) *ctlconfig.Config {
	t.Helper()
	cfg := ctlconfig.Default()
	cfg.Tunnels[0].URL = "https://overdeck.example.com/"
	cfg.Tunnels[0].Exec = "/usr/bin/socat TCP-LISTEN:8441,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:3210"
	cfg.Tunnels[1].URL = "https://overdeck-vm.example.com/"
	cfg.Tunnels[1].Exec = "/usr/local/bin/tunnel run --name overdeck-vm --upstream http://127.0.0.1:3210 --rate 100%"
	return cfg
}

// params is what the tests render from: an mcpctl config, as mcpctl does.
type params struct {
	Config                             *ctlconfig.Config
	MCPCtl, MCPCtlConfig, CanaryBinary string
}

func render(p params) ([]units.Unit, error) {
	var spec *units.Spec
	if p.Config != nil {
		var err error
		if spec, err = p.Config.UnitSpec(); err != nil {
			return nil, err
		}
	}
	return units.Render(units.Params{Spec: spec, MCPCtl: p.MCPCtl, MCPCtlConfig: p.MCPCtlConfig, CanaryBinary: p.CanaryBinary})
}

func TestRenderGolden(t *testing.T) {
	cfg := goldenConfig(t)
	us, err := render(params{Config: cfg, CanaryBinary: units.CanaryBinary(cfg.Install.Root, "v1.2.3")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"mcp-backend.socket", "mcp-backend.slice", "mcp-backend@.service", "mcp-jobs.slice", "mcp-backend-canary.socket", "mcp-backend-canary.service",
		"mcp-tunnel-overdeck.service", "mcp-tunnel-overdeck-vm.service",
		"mcp-watchdog.service", "mcp-watchdog.timer", "mcpctl-pending-rollback.service",
	}
	if got := names(us); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("units = %v, want %v", got, want)
	}
	for _, u := range us {
		golden.Check(t, filepath.Join("golden", u.Name), u.Content)
	}
}

// TestRenderNotifyGolden: the approvals notifier's units are rendered only
// when approvals.notify is configured, after the others.
func TestRenderNotifyGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		notify bool
		want   []string
	}{
		{"not configured", false, nil},
		{"configured", true, []string{units.NotifyService, units.NotifyPath, units.NotifyTimer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			if tc.notify {
				cfg.Approvals.Notify.Command = "/usr/local/bin/notify-approval"
			}
			us, err := render(params{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			got := names(us)[len(names(us))-len(tc.want):]
			if tc.want == nil {
				got = slices.DeleteFunc(names(us), func(n string) bool { return !strings.HasPrefix(n, "mcp-approvals-") })
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("notifier units = %v, want %v", got, tc.want)
			}
			for _, u := range us {
				if slices.Contains(tc.want, u.Name) {
					golden.Check(t, filepath.Join("golden", u.Name), u.Content)
				}
			}
		})
	}
}

func TestRenderDeterministic(t *testing.T) {
	cfg := goldenConfig(t)
	a, err := render(params{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b, err := render(params{Config: goldenConfig(t)})
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) {
			t.Fatalf("run %d: %d units, want %d", i, len(b), len(a))
		}
		for j := range a {
			if a[j].Name != b[j].Name || !bytes.Equal(a[j].Content, b[j].Content) || a[j].Enable != b[j].Enable {
				t.Fatalf("run %d: unit %s differs", i, a[j].Name)
			}
		}
	}
}

// directives parses "Key=Value" lines of a unit, section-qualified.
func directives(content []byte) map[string][]string {
	m := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(content), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			m[section+"."+k] = append(m[section+"."+k], v)
		}
	}
	return m
}

func TestRenderContents(t *testing.T) {
	cfg := goldenConfig(t)
	cfg.Guardrails = ctlconfig.Guardrails{TasksMax: 300, LimitNOFILE: 4096, MemoryHigh: "1G", MemoryMax: "2G", CPUWeight: 50, TimeoutStopSec: 7, SocketBacklog: 1024, JobsMemoryMax: "3G", JobsTasksMax: 999}
	us, err := render(params{Config: cfg, MCPCtl: "/opt/bin/mcpctl", MCPCtlConfig: "/etc/x/mcpctl.json", CanaryBinary: "/opt/mcp-backend/releases/v9/mcp-backend"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]units.Unit{}
	for _, u := range us {
		byName[u.Name] = u
	}
	type want map[string]string
	tests := []struct {
		unit   string
		want   want
		absent []string
		enable bool
	}{
		{"mcp-backend@.service", want{
			"Service.Type": "notify", "Service.Restart": "on-failure", "Service.KillMode": "mixed",
			"Service.WatchdogSec": "10s", "Service.TasksMax": "300", "Service.LimitNOFILE": "4096",
			"Service.MemoryHigh": "1G", "Service.MemoryMax": "2G", "Service.CPUWeight": "50", "Service.TimeoutStopSec": "7",
			"Service.ExecStart":       "/opt/mcp-backend/slots/%i/mcp-backend serve --config /etc/mcp-backend/config.json --listen 127.0.0.1:3210",
			"Service.Sockets":         "mcp-backend.socket",
			"Service.Slice":           "mcp-backend.slice",
			"Service.EnvironmentFile": "-/run/mcpctl/slots/%i.env",
			"Unit.StartLimitBurst":    "5",
			"Unit.OnFailure":          "mcp-watchdog.service",
			"Install.WantedBy":        "multi-user.target",
			"Install.DefaultInstance": "blue",
			"Unit.After":              "network.target mcp-backend.socket mcpctl-pending-rollback.service",
			"Unit.Requires":           "mcp-backend.socket",
			"Service.StateDirectory":  "mcp-backend", "Service.StateDirectoryMode": "0700",
		}, []string{"Unit.BindsTo", "Unit.PartOf"}, true},
		{"mcp-backend.slice", want{"Slice.MemoryHigh": "1G", "Slice.MemoryMax": "2G", "Slice.TasksMax": "300", "Slice.CPUWeight": "50"}, []string{"Install.WantedBy"}, false},
		{"mcp-jobs.slice", want{"Slice.MemoryMax": "3G", "Slice.TasksMax": "999"}, []string{"Install.WantedBy"}, false},
		{"mcp-backend.socket", want{
			"Socket.ListenStream": "127.0.0.1:3210", "Socket.Service": "mcp-backend@blue.service",
			"Socket.Backlog": "1024", "Socket.FreeBind": "yes", "Install.WantedBy": "sockets.target",
		}, []string{"Socket.Accept", "Unit.PartOf", "Unit.BindsTo", "Unit.Requires"}, true},
		{"mcp-backend-canary.socket", want{
			"Socket.ListenStream": "127.0.0.1:3211", "Socket.Service": "mcp-backend-canary.service", "Socket.Backlog": "1024",
		}, []string{"Install.WantedBy"}, false},
		{"mcp-backend-canary.service", want{
			"Service.Type": "notify", "Service.TasksMax": "300", "Service.MemoryMax": "2G", "Service.CPUWeight": "50",
			"Service.ExecStart": "/opt/mcp-backend/releases/v9/mcp-backend serve --config /etc/mcp-backend/canary.json --listen 127.0.0.1:3211",
			"Unit.Requires":     "mcp-backend-canary.socket", "Unit.After": "network.target mcp-backend-canary.socket",
		}, []string{"Install.WantedBy", "Service.StateDirectory"}, false},
		{"mcp-tunnel-overdeck.service", want{
			"Service.Restart":   "always",
			"Service.ExecStart": "/usr/bin/socat TCP-LISTEN:8441,bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:3210",
		}, []string{"Unit.BindsTo", "Unit.PartOf", "Unit.Requires", "Unit.Requisite"}, true},
		{"mcp-tunnel-overdeck-vm.service", want{
			"Service.Restart":   "always",
			"Service.ExecStart": "/usr/local/bin/tunnel run --name overdeck-vm --upstream http://127.0.0.1:3210 --rate 100%%",
		}, []string{"Unit.BindsTo", "Unit.PartOf", "Unit.Requires", "Unit.Requisite"}, true},
		{"mcp-watchdog.service", want{
			"Service.Type": "oneshot", "Service.ExecStart": "/opt/bin/mcpctl --config /etc/x/mcpctl.json watchdog",
		}, []string{"Install.WantedBy"}, false},
		{"mcp-watchdog.timer", want{"Timer.Unit": "mcp-watchdog.service", "Install.WantedBy": "timers.target"}, nil, true},
		{"mcpctl-pending-rollback.service", want{
			"Service.Type": "oneshot", "Unit.Before": "mcp-backend.service mcp-backend@blue.service mcp-backend@green.service", "Install.WantedBy": "multi-user.target",
			"Service.ExecStart": "/opt/bin/mcpctl --config /etc/x/mcpctl.json rollback --if-pending --boot",
		}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.unit, func(t *testing.T) {
			u, ok := byName[tc.unit]
			if !ok {
				t.Fatalf("unit not rendered")
			}
			if u.Enable != tc.enable {
				t.Errorf("Enable = %v, want %v", u.Enable, tc.enable)
			}
			d := directives(u.Content)
			for k, v := range tc.want {
				if got := d[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want [%q]", k, got, v)
				}
			}
			for _, k := range tc.absent {
				if _, ok := d[k]; ok {
					t.Errorf("%s present, must be absent", k)
				}
			}
		})
	}
}

func TestRenderWithoutCanary(t *testing.T) {
	us, err := render(params{Config: goldenConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.Name == "mcp-backend-canary.service" || u.Name == "mcp-backend-canary.socket" {
			t.Fatal("canary rendered without a canary binary")
		}
	}
	if len(us) != 9 {
		t.Fatalf("%d units, want 9: %v", len(us), names(us))
	}
}

func TestRenderRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*params)
		want   string
	}{
		{"no config", func(p *params) { p.Config = nil }, "no config"},
		{"invalid guardrail", func(p *params) { p.Config.Guardrails.CPUWeight = 0 }, "guardrails.cpuWeight = 0"},
		{"tunnel without url", func(p *params) { p.Config.Tunnels[1].URL = "" }, `tunnels[1].url = ""`},
		{"tunnel without exec", func(p *params) { p.Config.Tunnels[0].Exec = " " }, `tunnels[0].exec = " "`},
		{"tunnel exec continues", func(p *params) { p.Config.Tunnels[0].Exec = `/bin/x \` }, `must not end in a backslash`},
		{"relative mcpctl", func(p *params) { p.MCPCtl = "mcpctl" }, `mcpctl binary = "mcpctl": must be an absolute path`},
		{"backend listen host name", func(p *params) { p.Config.Backend.Listen = "localhost:3210" }, `backend.listen = "localhost:3210": must be IP:PORT`},
		{"canary listen host name", func(p *params) {
			p.Config.Canary.Listen = "canary.internal:3211"
			p.CanaryBinary = "/opt/mcp-backend/releases/v9/mcp-backend"
		}, `canary.listen = "canary.internal:3211"`},
		{"canary with space", func(p *params) { p.CanaryBinary = "/opt/a b/mcp-backend" }, `canary binary = "/opt/a b/mcp-backend"`},
		// Values that would add directives or ExecStart arguments.
		{"listen injecting directives", func(p *params) { p.Config.Backend.Listen = "127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210" }, `backend.listen = "127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210": must be IP:PORT`},
		{"listen adding arguments", func(p *params) { p.Config.Canary.Listen = "127.0.0.1 --config /tmp/x:3211" }, `canary.listen = "127.0.0.1 --config /tmp/x:3211": must be IP:PORT`},
		{"tunnel name injecting a directive", func(p *params) { p.Config.Tunnels[0].Name = "x\x0bExecStartPre=/bin/x" }, `tunnels[0].name`},
		{"tunnel exec with a form feed", func(p *params) { p.Config.Tunnels[0].Exec = "/bin/tunnel\fUser=root" }, `tunnels[0].exec`},
		{"mcpctl with a form feed", func(p *params) { p.MCPCtl = "/opt/bin/mcpctl\fUser=root" }, `mcpctl binary = "/opt/bin/mcpctl\fUser=root": must not contain control characters`},
		{"mcpctl config with NEL", func(p *params) { p.MCPCtlConfig = "/etc/x\u0085y.json" }, `mcpctl config = "/etc/x\u0085y.json": must not contain control characters`},
		{"canary with escape", func(p *params) { p.CanaryBinary = "/opt/x\x1b[2J/mcp-backend" }, `must not contain control characters`},
		{"memoryHigh of 1K", func(p *params) { p.Config.Guardrails.MemoryHigh = "1K" }, `guardrails.memoryHigh = "1K": must be at least 64M`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := params{Config: goldenConfig(t)}
			tc.mutate(&p)
			_, err := render(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSystemdAnalyzeVerify feeds every rendered unit to systemd's own
// checker, with the binaries they name present as stubs.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	tmp := t.TempDir()
	stub := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := goldenConfig(t)
	cfg.Install.Root = filepath.Join(tmp, "opt")
	stub(units.CurrentBinary(cfg.Install.Root))
	// systemd-analyze verifies the template as instance "i".
	for _, slot := range append([]string{"i"}, units.Slots...) {
		stub(filepath.Join(units.SlotLink(cfg.Install.Root, slot), "mcp-backend"))
	}
	canary := stub(units.CanaryBinary(cfg.Install.Root, "v2"))
	mcpctl := stub(filepath.Join(tmp, "bin", "mcpctl"))
	tunnel := stub(filepath.Join(tmp, "bin", "tunnel"))
	cfg.Tunnels[0].Exec = tunnel + " --port 1 --rate 5%"
	cfg.Tunnels[1].Exec = tunnel + " --port 2"
	us, err := render(params{Config: cfg, MCPCtl: mcpctl, MCPCtlConfig: filepath.Join(tmp, "mcpctl.json"), CanaryBinary: canary})
	if err != nil {
		t.Fatal(err)
	}
	unitDir := filepath.Join(tmp, "units")
	if err := os.MkdirAll(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// All files first: a socket is verified with the service it starts.
	for _, u := range us {
		if err := os.WriteFile(filepath.Join(unitDir, u.Name), u.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range us {
		path := filepath.Join(unitDir, u.Name)
		t.Run(u.Name, func(t *testing.T) {
			cmd := exec.Command(analyze, "verify", "--man=no", path)
			cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
			out, err := cmd.CombinedOutput()
			// Other units on the host may draw warnings; only ours matter.
			var own []string
			for _, line := range strings.Split(string(out), "\n") {
				if ownUnitRE.MatchString(line) {
					own = append(own, line)
				}
			}
			if err != nil || len(own) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", u.Name, err, out)
			}
		})
	}
}

var ownUnitRE = regexp.MustCompile(`mcp-|mcpctl`)

func names(us []units.Unit) []string {
	var s []string
	for _, u := range us {
		s = append(s, u.Name)
	}
	return s
}

func TestGoMemLimit(t *testing.T) {
	tests := map[string]string{"6G": "5529MiB", "1G": "921MiB", "512M": "460MiB", "64M": "57MiB", "infinity": "", "bogus": "",
		"1K": "", "1M": ""} // never GOMEMLIMIT=0MiB
	for high, want := range tests {
		if got := units.GoMemLimit(high); got != want {
			t.Errorf("goMemLimit(%q) = %q, want %q", high, got, want)
		}
	}
}
