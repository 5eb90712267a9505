package config

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want func(Config) bool
	}{
		{"empty object gets all defaults", `{}`, func(c Config) bool { return equal(c, Default()) }},
		{"file without concurrency gets 48/8/8/64/30000", `{"listen":"127.0.0.1:4000"}`, func(c Config) bool {
			return c.Concurrency == Concurrency{48, 8, 8, 64, 30000, 1, 1024, 300000} && c.Listen == "127.0.0.1:4000"
		}},
		{"partial concurrency keeps other defaults", `{"concurrency":{"maxShell":4}}`, func(c Config) bool {
			return c.Concurrency == Concurrency{48, 8, 4, 64, 30000, 1, 1024, 300000}
		}},
		{"limits default 4 MiB / 6 MiB", `{}`, func(c Config) bool {
			return c.Limits.OutputBytes == 4194304 && c.Limits.ResponseBytes == 6291456
		}},
		{"files default: every root, host credentials denied", `{}`, func(c Config) bool {
			return slices.Equal(c.Files.Roots, []string{"/"}) && slices.Equal(c.Files.Deny, DefaultDeny()) &&
				slices.Contains(c.Files.Deny, "/etc/shadow") && slices.Contains(c.Files.Deny, "/etc/mcpctl")
		}},
		{"files.roots alone keeps the default deny", `{"files":{"roots":["/srv","/var/log"]}}`, func(c Config) bool {
			return slices.Equal(c.Files.Roots, []string{"/srv", "/var/log"}) && slices.Equal(c.Files.Deny, DefaultDeny())
		}},
		{"files.deny replaces the defaults", `{"files":{"deny":["/srv/secret"]}}`, func(c Config) bool {
			return slices.Equal(c.Files.Deny, []string{"/srv/secret"}) && slices.Equal(c.Files.Roots, []string{"/"})
		}},
		{"files.deny may be empty", `{"files":{"deny":[]}}`, func(c Config) bool { return len(c.Files.Deny) == 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("defaults invalid: %v", err)
			}
			if !tc.want(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}

func equal(a, b Config) bool {
	return a.Listen == b.Listen && len(a.AllowedHosts) == len(b.AllowedHosts) && a.Auth == b.Auth &&
		a.Concurrency == b.Concurrency && a.Limits == b.Limits && a.Shell == b.Shell
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"unknown top-level key", `{"listn":"x"}`, `unknown key "listn"`},
		{"unknown nested key", `{"concurrency":{"maxActiv":3}}`, `unknown key "maxActiv"`},
		{"key in another case", `{"CONCURRENCY":{"maxShell":4}}`, `unknown key "CONCURRENCY"`},
		{"nested key in another case", `{"concurrency":{"MaxShell":4}}`, `unknown key "MaxShell" (in concurrency`},
		{"unknown files key", `{"files":{"allow":["/"]}}`, `unknown key "allow" (in files`},
		{"the loaded path is not a key", `{"Path":"/x"}`, `unknown key "Path"`},
		{"wrong type", `{"concurrency":{"maxActive":"many"}}`, "concurrency.maxActive: wrong type"},
		{"not JSON", `listen: x`, "invalid JSON"},
		{"empty", ``, "empty file"},
		{"trailing", `{} {}`, "trailing data"},
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
		name, in, want string
	}{
		{"maxShell above non-control", `{"concurrency":{"maxShell":50}}`, "concurrency.maxShell = 50: must be <= maxActive - reservedControl (40)"},
		{"reserved not below max", `{"concurrency":{"maxActive":8,"reservedControl":8,"maxShell":1}}`, "concurrency.reservedControl = 8: must be < maxActive (8)"},
		{"zero maxActive", `{"concurrency":{"maxActive":0}}`, "concurrency.maxActive = 0: must be 1..4095"},
		{"negative queue", `{"concurrency":{"maxQueue":-1}}`, "concurrency.maxQueue = -1: must be 0..4095"},
		{"negative flow reserve", `{"concurrency":{"flowReserve":-1}}`, "concurrency.flowReserve = -1: must be 0..16"},
		{"flow table of none", `{"concurrency":{"maxFlows":0}}`, "concurrency.maxFlows = 0: must be 1..65536"},
		{"flows forgotten at once", `{"concurrency":{"flowIdleMs":10}}`, "concurrency.flowIdleMs = 10: must be 1000..86400000"},
		{"huge queue", `{"concurrency":{"maxQueue":5000}}`, "concurrency.maxQueue = 5000: must be 0..4095"},
		{"zero queue wait", `{"concurrency":{"queueWaitMs":0}}`, "concurrency.queueWaitMs = 0: must be 1..3600000"},
		{"queue wait overflowing a duration", `{"concurrency":{"queueWaitMs":9300000000000}}`, "concurrency.queueWaitMs = 9300000000000: must be 1..3600000"},
		{"output of a TiB", `{"limits":{"outputBytes":1099511627776,"responseBytes":1099511693312}}`, "limits.outputBytes = 1099511627776: must be 1..67108864"},
		{"output overflowing the budget sum", `{"limits":{"outputBytes":9223372036854775807}}`, "limits.outputBytes = 9223372036854775807: must be 1..67108864"},
		{"response of max int64", `{"limits":{"responseBytes":9223372036854775807}}`, "limits.responseBytes = 9223372036854775807: must be 1..134217728"},
		{"zero output", `{"limits":{"outputBytes":0}}`, "limits.outputBytes = 0: must be 1..67108864"},
		{"shell timeout overflowing a duration", `{"shell":{"maxTimeoutMs":9300000000000}}`, "shell.maxTimeoutMs = 9300000000000: must be 1..86400000"},
		{"default shell timeout too long", `{"shell":{"defaultTimeoutMs":86400001}}`, "shell.defaultTimeoutMs = 86400001: must be 1..86400000"},
		{"listen with a newline", `{"listen":"127.0.0.1\nExecStartPre=/bin/x:3210"}`, `listen = "127.0.0.1\nExecStartPre=/bin/x:3210": must be HOST:PORT`},
		{"listen with a space", `{"listen":"127.0.0.1 --x:3210"}`, `listen = "127.0.0.1 --x:3210": must be HOST:PORT`},
		{"listen port out of range", `{"listen":"127.0.0.1:70000"}`, `listen = "127.0.0.1:70000": must be HOST:PORT with an IP address or host name and a port 0..65535`},
		{"listen named port", `{"listen":"127.0.0.1:http"}`, `listen = "127.0.0.1:http"`},
		{"listen bad IP", `{"listen":"999.0.0.1:80"}`, `listen = "999.0.0.1:80"`},
		{"allowed host with a control byte", `{"allowedHosts":["a.example\u0000"]}`, `allowedHosts[0] = "a.example\x00"`},
		{"shell path with a NUL", `{"shell":{"path":"/bin/bash\u0000x"}}`, `shell.path = "/bin/bash\x00x": must not contain control characters`},
		{"shell path unclean", `{"shell":{"path":"/bin/../bin/bash"}}`, `shell.path = "/bin/../bin/bash": must be a clean path (/bin/bash)`},
		{"token file relative", `{"auth":{"bearerTokenFile":"token"}}`, `auth.bearerTokenFile = "token": must be an absolute path`},
		{"bad listen", `{"listen":"3210"}`, `listen = "3210": must be HOST:PORT`},
		{"relative shell", `{"shell":{"path":"bash"}}`, `shell.path = "bash": must be an absolute path`},
		{"response below output", `{"limits":{"outputBytes":100,"responseBytes":10}}`, "limits.responseBytes = 10: must be >= limits.outputBytes + 65536 (65636)"},
		{"default timeout above max", `{"shell":{"defaultTimeoutMs":9000,"maxTimeoutMs":1000}}`, "shell.defaultTimeoutMs = 9000"},
		{"origin with a path", `{"allowedOrigins":["https://claude.ai/"]}`, `allowedOrigins[0] = "https://claude.ai/": must be an origin scheme://host[:port]`},
		{"origin without scheme", `{"allowedOrigins":["claude.ai"]}`, `allowedOrigins[0] = "claude.ai"`},
		{"origin of another scheme", `{"allowedOrigins":["ftp://x.example"]}`, `allowedOrigins[0] = "ftp://x.example"`},
		{"origin in upper case", `{"allowedOrigins":["https://Claude.ai"]}`, `allowedOrigins[0] = "https://Claude.ai"`},
		{"no files root", `{"files":{"roots":[]}}`, `files.roots = []: must name at least one directory`},
		{"relative files root", `{"files":{"roots":["srv"]}}`, `files.roots[0] = "srv": must be an absolute path`},
		{"unclean files root", `{"files":{"roots":["/srv/../etc"]}}`, `files.roots[0] = "/srv/../etc": must be a clean path (/etc)`},
		{"relative deny", `{"files":{"deny":["/etc/shadow","shadow"]}}`, `files.deny[1] = "shadow": must be an absolute path pattern`},
		{"bad deny glob", `{"files":{"deny":["/etc/[x"]}}`, `files.deny[0] = "/etc/[x": component "[x" is not a valid pattern`},
		{"deny with a control byte", `{"files":{"deny":["/etc/\u0001"]}}`, `files.deny[0] = "/etc/\x01": must not contain control characters`},
		{"audit sink unknown", `{"audit":{"sink":"syslog"}}`, `audit.sink = "syslog": must be "auto", "journal", "file" or "off"`},
		{"audit file sink without a file", `{"audit":{"sink":"file"}}`, `audit.file = "": must be set when audit.sink is "file"`},
		{"audit file relative", `{"audit":{"file":"audit.jsonl"}}`, `audit.file = "audit.jsonl": must be an absolute path`},
		{"audit file tiny rotation", `{"audit":{"fileMaxBytes":10}}`, `audit.fileMaxBytes = 10: must be 4096..1099511627776`},
		{"audit keep negative", `{"audit":{"fileKeep":-1}}`, `audit.fileKeep = -1: must be 0..100`},
		{"audit buffer zero", `{"audit":{"bufferRecords":0}}`, `audit.bufferRecords = 0: must be 1..1048576`},
		{"audit on failure unknown", `{"audit":{"onFailure":"halt"}}`, `audit.onFailure = "halt": must be "continue" or "refuse"`},
		{"jobs per principal zero", `{"jobs":{"maxRunningPerPrincipal":0}}`, `jobs.maxRunningPerPrincipal = 0: must be 1..1024`},
		{"jobs per principal huge", `{"jobs":{"maxRunningPerPrincipal":5000}}`, `jobs.maxRunningPerPrincipal = 5000: must be 1..1024`},
		{"waiters per principal zero", `{"jobs":{"maxWaitersPerPrincipal":0}}`, `jobs.maxWaitersPerPrincipal = 0: must be 1..4096`},
		{"waiters per principal negative", `{"jobs":{"maxWaitersPerPrincipal":-1}}`, `jobs.maxWaitersPerPrincipal = -1: must be 1..4096`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if err := func() error {
		c, _ := Parse(strings.NewReader(`{"allowedOrigins":["https://claude.ai","http://localhost:6274"]}`))
		return c.Validate()
	}(); err != nil {
		t.Fatalf("exact origins must be valid: %v", err)
	}
	for _, ok := range []string{
		`{"concurrency":{"maxQueue":0}}`, // reject at once
		`{"listen":"[::1]:3210"}`, `{"listen":"localhost:3210"}`, `{"listen":":3210"}`, `{"listen":"0.0.0.0:0"}`,
		`{"allowedHosts":["mcp.example.com","10.0.0.5","::1","tunnel_1.example."]}`,
		`{"concurrency":{"queueWaitMs":3600000},"shell":{"defaultTimeoutMs":86400000,"maxTimeoutMs":86400000}}`,
		`{"limits":{"outputBytes":67108864,"responseBytes":134217728}}`,
		`{"auth":{"bearerTokenFile":"/etc/mcp-backend/token"}}`,
		`{"jobs":{"maxRunning":4,"maxRunningPerConversation":2,"maxWaiters":4}}`, // per-principal defaults above the caps
		`{"files":{"roots":["/srv","/var/log"],"deny":["/srv/*/secret","/**/.ssh/id_*"]}}`,
	} {
		c, err := Parse(strings.NewReader(ok))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s must be valid: %v", ok, err)
		}
	}
}

// TestLoadRefusesWhatIsNotAConfigFile: Load reads through the bounded
// reader (strictjson.ReadFile, tested there against FIFOs, streams and
// oversized files), so a FIFO fails at once, naming the path. (/dev/zero
// itself is tried on the real binary, under a memory rlimit, in
// cmd/mcp-backend.)
func TestLoadRefusesWhatIsNotAConfigFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fifo); err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "is a FIFO, want a regular file") {
		t.Fatalf("Load(FIFO) = %v, want a refusal naming %s", err, fifo)
	}
	// Parse reads through the same bound (strictjson.ReadAll, tested there
	// against a reader without end).
	if _, err := Parse(strings.NewReader("{" + strings.Repeat(" ", 2<<20) + "}")); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Fatalf("Parse of 2 MiB = %v, want the size refusal", err)
	}
}

// TestValidConfigIsUsable: at every bound Validate accepts, the values the
// program derives from the config stay in range.
func TestValidConfigIsUsable(t *testing.T) {
	c := Default()
	c.Concurrency.QueueWaitMs = maxQueueWaitMs
	c.Shell.DefaultTimeoutMs, c.Shell.MaxTimeoutMs = maxShellTimeoutMs, maxShellTimeoutMs
	c.Limits.OutputBytes, c.Limits.ResponseBytes = maxOutputBytes, maxResponseBytes
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := usable(c); err != nil {
		t.Fatal(err)
	}
}
