package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/urfave/cli/v2"
)

// TestUsageErrorsExit2: every usage error exits 2 (the README's table), for
// every command: before, an unknown command exited 3 and a bad command flag 1.
func TestUsageErrorsExit2(t *testing.T) {
	cfg := writeConfig(t, `{}`)
	type tc struct {
		name string
		args []string
		code int
		want string
	}
	tests := []tc{
		{"unknown command", []string{"bogus"}, 2, `unknown command "bogus"`},
		{"typo suggests the command", []string{"serv"}, 2, `did you mean "serve"?`},
		{"unknown global flag", []string{"--bogus"}, 2, "bogus"},
		{"help", []string{"help"}, 0, "USAGE"},
		{"help of a command", []string{"help", "serve"}, 0, "serve MCP over HTTP"},
		{"help of an unknown command", []string{"help", "bogus"}, 2, `unknown command "bogus"`},
		{"--version", []string{"--version"}, 0, "mcp-backend version"},
		{"bad log level", []string{"serve", "--config", cfg, "--log-level", "loud"}, 2, `--log-level "loud"`},
		{"config without --effective", []string{"config", "--config", cfg}, 2, "--effective is required"},
		{"flag after argument", []string{"check-config", "--config", cfg}, 0, "ok"},
	}
	cliargs.Walk(newApp(&deps{}).Commands, func(path string, c *cli.Command) {
		argv := strings.Fields(path)
		if c.Hidden { // man: takes no config
			tests = append(tests, tc{path + " unexpected argument", append(argv, "extra"), 2, `unexpected argument "extra"`})
			return
		}
		tests = append(tests,
			tc{path + " unknown flag", append(argv, "--bogus"), 2, "unknown flag --bogus"},
			tc{path + " unexpected argument", append(argv, "--config", cfg, "extra"), 2, `unexpected argument "extra"`},
			tc{path + " missing --config", argv, 2, "config"},
		)
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"mcp-backend"}, tc.args...), strings.NewReader(""), &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Fatalf("mcp-backend %s: exit %d, want %d and %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), code, tc.code, tc.want, out.String(), errb.String())
			}
		})
	}
}

// TestConfigEffective: config --effective prints every default, and what
// it prints is a config check-config accepts and prints back the same.
func TestConfigEffective(t *testing.T) {
	cfg := writeConfig(t, `{"concurrency":{"maxShell":4}}`)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"mcp-backend", "config", "--config", cfg, "--effective"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d %s", code, errb.String())
	}
	for _, want := range []string{`"maxShell": 4`, `"maxActive": 48`, `"listen": "127.0.0.1:3210"`, `"responseBytes"`, `"allow": "root"`, `"approved": "root"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("effective config lacks %s:\n%s", want, out.String())
		}
	}
	again := writeConfig(t, out.String())
	var out2 bytes.Buffer
	if code := run(context.Background(), []string{"mcp-backend", "check-config", "--config", again}, nil, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("check-config of the effective config: exit %d %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"mcp-backend", "config", "--effective", "--config", again}, nil, &out2, &errb); code != 0 || out2.String() != out.String() {
		t.Fatalf("effective config of the effective config differs:\n%s", out2.String())
	}
}

// TestManAndVersion: the man page is roff naming every command; --version
// keeps "mcp-backend version V" first (what candidate checks read) and adds
// the build's module, VCS revision and time and Go version.
func TestManAndVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"mcp-backend", "man"}, nil, &out, &bytes.Buffer{}); code != 0 || !strings.HasPrefix(out.String(), ".nh\n.TH mcp-backend 1") {
		t.Fatalf("man: exit %d\n%.200s", code, out.String())
	}
	for _, c := range []string{"serve", "stdio", "check-config", "config"} {
		if !strings.Contains(out.String(), c) {
			t.Errorf("man page lacks %s", c)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"mcp-backend", "--version"}, nil, &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("--version: exit %d", code)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "mcp-backend version ") || !strings.Contains(out.String(), "\nrevision: ") || !strings.Contains(out.String(), "\ngo:       go1.") {
		t.Fatalf("--version:\n%s", out.String())
	}
}
