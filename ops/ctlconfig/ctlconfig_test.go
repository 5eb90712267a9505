package ctlconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDefaultMatchesDesign(t *testing.T) {
	// The documented default mcpctl.json, verbatim: parsing it must give Default().
	const design = `{
  "backend":  { "unit": "mcp-backend.service", "listen": "127.0.0.1:3210", "config": "/etc/mcp-backend/config.json" },
  "canary":   { "unit": "mcp-backend-canary.service", "listen": "127.0.0.1:3211", "config": "/etc/mcp-backend/canary.json" },
  "install":  { "root": "/opt/mcp-backend", "keepReleases": 5 },
  "unitDir":  "/etc/systemd/system",
  "stateDir": "/var/lib/mcpctl",
  "tunnels":  [ { "name": "Overdeck", "unit": "mcp-tunnel-overdeck.service", "url": "", "exec": "" },
                { "name": "overdeck-vm", "unit": "mcp-tunnel-overdeck-vm.service", "url": "", "exec": "" } ],
  "rollback": { "deadline": "120s" },
  "guardrails": { "tasksMax": 512, "limitNOFILE": 65536, "memoryHigh": "6G", "memoryMax": "9G", "cpuWeight": 80, "timeoutStopSec": 5 }
}`
	got, err := Parse(strings.NewReader(design))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, Default()) {
		t.Fatalf("design JSON parses to\n%+v\nwant Default()\n%+v", got, Default())
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// And it round-trips, the deadline written as operators write it.
	b, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"deadline":"120s"`) {
		t.Fatalf("deadline marshals as %s", b)
	}
	back, err := Parse(strings.NewReader(string(b)))
	if err != nil || !reflect.DeepEqual(back, Default()) {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestParseKeepsDefaults(t *testing.T) {
	cfg, err := Parse(strings.NewReader(`{"backend":{"listen":"127.0.0.1:4000"},"guardrails":{"cpuWeight":100},"rollback":{"deadline":"30s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Backend.Listen = "127.0.0.1:4000"
	want.Guardrails.CPUWeight = 100
	want.Rollback.Deadline = Duration(30 * time.Second)
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
}

func TestParseTunnelsReplaceDefaults(t *testing.T) {
	// A tunnel in the file must not inherit fields of the default tunnel at
	// the same index.
	cfg, err := Parse(strings.NewReader(`{"tunnels":[{"name":"only"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Tunnel{{Name: "only"}}; !reflect.DeepEqual(cfg.Tunnels, want) {
		t.Fatalf("tunnels = %+v, want %+v", cfg.Tunnels, want)
	}
	cfg, err = Parse(strings.NewReader(`{"tunnels":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tunnels) != 0 {
		t.Fatalf("tunnels = %+v, want none", cfg.Tunnels)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"unknown key", `{"backend":{"unit":"x.service","port":1}}`, `unknown key "port" (in backend`},
		{"unknown top key", `{"bogus":1}`, `unknown key "bogus" (at the top level`},
		{"key in another case", `{"Backend":{"unit":"x.service"}}`, `unknown key "Backend"`},
		{"bad deadline", `{"rollback":{"deadline":"soon"}}`, `rollback.deadline = "soon": not a duration`},
		{"number deadline", `{"rollback":{"deadline":120}}`, `rollback.deadline = 120: not a duration`},
		{"bad notify timeout", `{"rollback":{"deadline":"2m"},"approvals":{"notify":{"timeout":"later"}}}`, `approvals.notify.timeout = "later": not a duration`},
		{"unknown notify key", `{"approvals":{"notify":{"shell":"mail"}}}`, `unknown key "shell"`},
		{"wrong type", `{"guardrails":{"tasksMax":"512"}}`, `guardrails.tasksMax`},
		{"trailing", `{} {}`, `trailing data`},
		{"not json", `nope`, `parse mcpctl config`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"notify configured", func(c *Config) { c.Approvals.Notify.Command = "/usr/bin/mail" }, ""},
		{"notify command relative", func(c *Config) { c.Approvals.Notify.Command = "mail -s x" }, `approvals.notify.command = "mail -s x": must be a clean absolute path`},
		{"notify arg with a newline", func(c *Config) {
			c.Approvals.Notify.Command, c.Approvals.Notify.Args = "/usr/bin/mail", []string{"a\nb"}
		}, `approvals.notify.args[0] = "a\nb": must not contain control characters`},
		{"notify timeout", func(c *Config) { c.Approvals.Notify.Timeout = Duration(11 * time.Minute) }, `approvals.notify.timeout = "660s": must be 1s..10m`},
		{"notify retries", func(c *Config) { c.Approvals.Notify.Retries = 11 }, `approvals.notify.retries = 11: must be 0..10`},
		{"approvals dir relative", func(c *Config) { c.Approvals.Dir = "approvals" }, `approvals.dir = "approvals": must be an absolute path`},
		{"cpuWeight zero", func(c *Config) { c.Guardrails.CPUWeight = 0 }, "guardrails.cpuWeight = 0: must be 1..10000"},
		{"cpuWeight too big", func(c *Config) { c.Guardrails.CPUWeight = 10001 }, "guardrails.cpuWeight = 10001: must be 1..10000"},
		{"cpuWeight max", func(c *Config) { c.Guardrails.CPUWeight = 10000 }, ""},
		{"memoryMax not a size", func(c *Config) { c.Guardrails.MemoryMax = "9 gigs" }, `guardrails.memoryMax = "9 gigs": not a size`},
		{"memoryHigh not a size", func(c *Config) { c.Guardrails.MemoryHigh = "-1G" }, `guardrails.memoryHigh = "-1G": not a size`},
		{"memoryHigh above max", func(c *Config) { c.Guardrails.MemoryHigh = "10G" }, `guardrails.memoryHigh = "10G": must not be above guardrails.memoryMax = "9G"`},
		{"memoryHigh in other unit above", func(c *Config) { c.Guardrails.MemoryHigh = "9217M" }, `must not be above`},
		{"memory infinity", func(c *Config) { c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax = "infinity", "infinity" }, ""},
		{"tasksMax", func(c *Config) { c.Guardrails.TasksMax = 0 }, "guardrails.tasksMax = 0: must be"},
		{"limitNOFILE", func(c *Config) { c.Guardrails.LimitNOFILE = 10 }, "guardrails.limitNOFILE = 10: must be"},
		{"timeoutStopSec", func(c *Config) { c.Guardrails.TimeoutStopSec = 0 }, "guardrails.timeoutStopSec = 0: must be"},
		{"tunnel without name", func(c *Config) { c.Tunnels[0].Name = "" }, `tunnels[0].name = "": must not be empty`},
		{"tunnel without unit", func(c *Config) { c.Tunnels[1].Unit = "" }, `tunnels[1].unit = "": must be a unit name`},
		{"tunnel bad url", func(c *Config) { c.Tunnels[1].URL = "ftp://x" }, `tunnels[1].url = "ftp://x": must be an http`},
		{"tunnel multi-line exec", func(c *Config) { c.Tunnels[0].Exec = "a\nb" }, `tunnels[0].exec = "a\nb": must be a single line`},
		{"duplicate tunnel unit", func(c *Config) { c.Tunnels[1].Unit = c.Tunnels[0].Unit }, `tunnels[1].unit = "mcp-tunnel-overdeck.service": duplicate unit name (also tunnels[0].unit)`},
		{"tunnel unit is backend", func(c *Config) { c.Tunnels[0].Unit = "mcp-backend.service" }, `duplicate unit name (also backend.unit)`},
		{"canary unit is backend", func(c *Config) { c.Canary.Unit = c.Backend.Unit }, `canary.unit = "mcp-backend.service": duplicate unit name`},
		{"fixed unit", func(c *Config) { c.Tunnels[0].Unit = "mcp-watchdog.service" }, `duplicate unit name (also a unit of mcpctl itself)`},
		{"duplicate tunnel name", func(c *Config) { c.Tunnels[1].Name = "Overdeck" }, `tunnels[1].name = "Overdeck": duplicate tunnel name`},
		{"deadline zero", func(c *Config) { c.Rollback.Deadline = 0 }, `rollback.deadline = "0s": must be 1s..24h`},
		{"listen", func(c *Config) { c.Backend.Listen = "3210" }, `backend.listen = "3210": must be IP:PORT`},
		{"listen port", func(c *Config) { c.Canary.Listen = "127.0.0.1:70000" }, `canary.listen = "127.0.0.1:70000": must be IP:PORT with an IP address and a port 1..65535`},
		// Values that would reach a unit file as extra directives or
		// ExecStart arguments.
		{"listen injecting directives", func(c *Config) { c.Backend.Listen = "127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210" },
			`backend.listen = "127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210": must be IP:PORT`},
		{"listen adding arguments", func(c *Config) { c.Backend.Listen = "127.0.0.1 --config /tmp/evil.json:3210" }, `backend.listen = "127.0.0.1 --config /tmp/evil.json:3210": must be IP:PORT`},
		{"listen host name", func(c *Config) { c.Canary.Listen = "localhost:3211" }, `canary.listen = "localhost:3211": must be IP:PORT`},
		{"listen zone", func(c *Config) { c.Canary.Listen = "[fe80::1%eth0\n]:3211" }, `must be IP:PORT`},
		{"listen port zero", func(c *Config) { c.Canary.Listen = "127.0.0.1:0" }, `must be IP:PORT`},
		{"listen leading zeros", func(c *Config) { c.Canary.Listen = "127.0.0.1:03211" }, `must be IP:PORT`},
		{"listen IPv6", func(c *Config) { c.Canary.Listen = "[::1]:3211" }, ""},
		{"unit with a newline", func(c *Config) { c.Backend.Unit = "x\nExecStartPre=/bin/x.service" }, `backend.unit = "x\nExecStartPre=/bin/x.service": must be a unit name`},
		{"unit with a space", func(c *Config) { c.Canary.Unit = "a b.service" }, `canary.unit = "a b.service": must be a unit name`},
		{"unit of another type", func(c *Config) { c.Tunnels[0].Unit = "mcp-tunnel.timer" }, `tunnels[0].unit = "mcp-tunnel.timer": must be a unit name`},
		{"unit with a backslash", func(c *Config) { c.Tunnels[0].Unit = `a\x2db.service` }, `must be a unit name`},
		{"unit starting with a dot", func(c *Config) { c.Tunnels[0].Unit = "..service" }, `must be a unit name`},
		{"unit name too long", func(c *Config) { c.Tunnels[0].Unit = strings.Repeat("a", 248) + ".service" }, `must be a unit name`},
		{"config path with a newline", func(c *Config) { c.Backend.Config = "/etc/x.json\nUser=root" }, `backend.config = "/etc/x.json\nUser=root": must not contain control characters`},
		{"config path with a tab", func(c *Config) { c.Canary.Config = "/etc/a\tb.json" }, `must not contain control characters`},
		{"config path with a non-breaking space", func(c *Config) { c.Canary.Config = "/etc/a\u00a0b.json" }, `must not contain whitespace`},
		{"config path with a semicolon", func(c *Config) { c.Canary.Config = "/etc/a;b.json" }, `must not contain whitespace, quotes, backslashes, %, $ or ;`},
		{"root with a NUL", func(c *Config) { c.Install.Root = "/opt/x\x00" }, `install.root = "/opt/x\x00": must not contain control characters`},
		{"root invalid UTF-8", func(c *Config) { c.Install.Root = "/opt/\xff" }, `must not contain control characters`},
		{"tunnel name with a newline", func(c *Config) { c.Tunnels[0].Name = "a\nExecStartPre=/bin/x" }, `tunnels[0].name = "a\nExecStartPre=/bin/x": must not contain control characters`},
		{"tunnel name with escape", func(c *Config) { c.Tunnels[0].Name = "a\x1b[2J" }, `must not contain control characters`},
		{"tunnel name padded", func(c *Config) { c.Tunnels[0].Name = " a" }, `must not have leading`},
		{"tunnel exec with a control byte", func(c *Config) { c.Tunnels[0].Exec = "/bin/tunnel \x0bx" }, `tunnels[0].exec = "/bin/tunnel \vx": must be a single line`},
		{"tunnel exec with CR", func(c *Config) { c.Tunnels[0].Exec = "/bin/tunnel\rUser=root" }, `must be a single line`},
		{"tunnel exec relative", func(c *Config) { c.Tunnels[0].Exec = "tunnel run" }, `tunnels[0].exec = "tunnel run": must start with the program's absolute path`},
		{"tunnel exec continues", func(c *Config) { c.Tunnels[0].Exec = `/bin/tunnel \` }, `must not end in a backslash`},
		{"tunnel exec ok", func(c *Config) { c.Tunnels[0].Exec = "/usr/bin/socat TCP-LISTEN:1,fork TCP:127.0.0.1:3210" }, ""},
		{"tunnel url with a space", func(c *Config) { c.Tunnels[0].URL = "https://a.example/ x" }, `tunnels[0].url = "https://a.example/ x": must be an http`},
		{"tunnel url with credentials", func(c *Config) { c.Tunnels[0].URL = "https://u:p@a.example/" }, `must be an http`},
		{"tunnel url bad port", func(c *Config) { c.Tunnels[0].URL = "https://a.example:99999/" }, `port 1..65535`},
		{"memoryMax 1K", func(c *Config) { c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax = "1K", "1K" },
			`guardrails.memoryHigh = "1K": must be at least 64M (or infinity)`},
		{"memoryMax below the minimum", func(c *Config) { c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax = "infinity", "63M" }, `guardrails.memoryMax = "63M": must be at least 64M`},
		{"memory at the minimum", func(c *Config) { c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax = "64M", "64M" }, ""},
		{"same listen", func(c *Config) { c.Canary.Listen = c.Backend.Listen }, `canary.listen = "127.0.0.1:3210": must differ`},
		{"relative root", func(c *Config) { c.Install.Root = "opt" }, `install.root = "opt": must be an absolute path`},
		{"root with space", func(c *Config) { c.Install.Root = "/opt/a b" }, `install.root = "/opt/a b": must not contain whitespace`},
		{"keepReleases", func(c *Config) { c.Install.KeepReleases = 0 }, `install.keepReleases = 0: must be 1..1000`},
		{"unitDir", func(c *Config) { c.UnitDir = "" }, `unitDir = "": must not be empty`},
		{"backend unit", func(c *Config) { c.Backend.Unit = "mcp-backend" }, `backend.unit = "mcp-backend": must be a unit name ending in .service`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.Guardrails.CPUWeight = 0
	c.Guardrails.MemoryMax = "lots"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "cpuWeight") || !strings.Contains(err.Error(), "memoryMax") {
		t.Fatalf("err = %v, want both problems", err)
	}
}

func TestValidateTunnels(t *testing.T) {
	c := Default()
	err := c.ValidateTunnels()
	if err == nil || !strings.Contains(err.Error(), `tunnels[0].url = "": must be`) || !strings.Contains(err.Error(), `tunnels[1].exec = "": must be`) {
		t.Fatalf("err = %v, want url and exec of the default tunnels named", err)
	}
	for i := range c.Tunnels {
		c.Tunnels[i].URL = "https://example.invalid/"
		c.Tunnels[i].Exec = "/usr/bin/tunnel run"
	}
	if err := c.ValidateTunnels(); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"guardrails":{"tasksMax":256}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"guardrails":{"cpuWeight":0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		explicit bool
		want     string // error substring, "" for success
		tasksMax int
	}{
		{"default path missing means defaults", missing, false, "", 512},
		{"explicit path missing is an error", missing, true, "no such file", 0},
		{"file read", good, true, "", 256},
		{"file at default path read", good, false, "", 256},
		{"invalid file", bad, true, "guardrails.cpuWeight = 0: must be 1..10000", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.path, tc.explicit)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Guardrails.TasksMax != tc.tasksMax {
				t.Fatalf("tasksMax = %d, want %d", cfg.Guardrails.TasksMax, tc.tasksMax)
			}
		})
	}
}

// TestLoadRefusesWhatIsNotAConfigFile: Load reads through the bounded
// reader (strictjson.ReadFile, tested there against FIFOs, streams and
// oversized files), so a FIFO named as mcpctl.json fails at once.
func TestLoadRefusesWhatIsNotAConfigFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fifo, true); err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "is a FIFO, want a regular file") {
		t.Fatalf("Load(FIFO) = %v, want a refusal naming %s", err, fifo)
	}
}

// TestGuardrailBounds: a stop timeout shorter than the backend's drain
// (2 s) and a socket backlog out of range are refused, naming the key.
func TestGuardrailBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"stop shorter than the drain", func(c *Config) { c.Guardrails.TimeoutStopSec = 1 }, "guardrails.timeoutStopSec = 1: must be 3..600"},
		{"backlog too small", func(c *Config) { c.Guardrails.SocketBacklog = 4 }, "guardrails.socketBacklog = 4: must be 16..65535"},
	} {
		c := Default()
		tc.mutate(c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	c, err := Parse(strings.NewReader(`{"guardrails":{"socketBacklog":2048}}`))
	if err != nil || c.Guardrails.SocketBacklog != 2048 || c.Guardrails.TimeoutStopSec != 5 {
		t.Fatalf("parse: %+v %v", c.Guardrails, err)
	}
}
