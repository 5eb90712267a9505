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
