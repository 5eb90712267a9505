package config

import (
	"strings"
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
			return c.Concurrency == Concurrency{48, 8, 8, 64, 30000} && c.Listen == "127.0.0.1:4000"
		}},
		{"partial concurrency keeps other defaults", `{"concurrency":{"maxShell":4}}`, func(c Config) bool {
			return c.Concurrency == Concurrency{48, 8, 4, 64, 30000}
		}},
		{"limits default 4 MiB / 6 MiB", `{}`, func(c Config) bool {
			return c.Limits.OutputBytes == 4194304 && c.Limits.ResponseBytes == 6291456
		}},
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
		{"huge queue", `{"concurrency":{"maxQueue":5000}}`, "concurrency.maxQueue = 5000: must be 0..4095"},
		{"zero queue wait", `{"concurrency":{"queueWaitMs":0}}`, "concurrency.queueWaitMs = 0: must be > 0"},
		{"bad listen", `{"listen":"3210"}`, `listen = "3210": must be HOST:PORT`},
		{"relative shell", `{"shell":{"path":"bash"}}`, `shell.path = "bash": must be an absolute path`},
		{"response below output", `{"limits":{"outputBytes":100,"responseBytes":10}}`, "limits.responseBytes = 10: must be >= limits.outputBytes + 65536 (65636)"},
		{"default timeout above max", `{"shell":{"defaultTimeoutMs":9000,"maxTimeoutMs":1000}}`, "shell.defaultTimeoutMs = 9000"},
		{"origin with a path", `{"allowedOrigins":["https://claude.ai/"]}`, `allowedOrigins[0] = "https://claude.ai/": must be an origin scheme://host[:port]`},
		{"origin without scheme", `{"allowedOrigins":["claude.ai"]}`, `allowedOrigins[0] = "claude.ai"`},
		{"origin of another scheme", `{"allowedOrigins":["ftp://x.example"]}`, `allowedOrigins[0] = "ftp://x.example"`},
		{"origin in upper case", `{"allowedOrigins":["https://Claude.ai"]}`, `allowedOrigins[0] = "https://Claude.ai"`},
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
	if err := func() error { c, _ := Parse(strings.NewReader(`{"concurrency":{"maxQueue":0}}`)); return c.Validate() }(); err != nil {
		t.Fatalf("maxQueue 0 must be valid (reject at once): %v", err)
	}
}
