package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runCLI runs mcpctl with argv and returns exit code, stdout and stderr.
func runCLI(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"mcpctl"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersionAndHelp(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"version", []string{"--version"}, 0, "mcpctl version"},
		{"help", []string{"--help"}, 0, "USAGE"},
		{"unknown flag", []string{"--bogus"}, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit = %d, want %d", code, tc.code)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("stdout %q lacks %q", out, tc.want)
			}
		})
	}
}

// TestNoColorAnyValue: NO_COLOR=yes (any non-empty value) means no colour,
// and must not break argument parsing.
func TestNoColorAnyValue(t *testing.T) {
	for _, v := range []string{"1", "yes", "true", "anything"} {
		t.Run(v, func(t *testing.T) {
			var out, errb bytes.Buffer
			d := &deps{stdout: &out, stderr: &errb, getenv: func(k string) string {
				if k == "NO_COLOR" {
					return v
				}
				return ""
			}}
			var got bool
			app := newApp(d)
			app.Commands = append(app.Commands, &cli.Command{Name: "probe", Action: func(c *cli.Context) error {
				got = c.Bool("no-color")
				return nil
			}})
			if code := runApp(context.Background(), app, []string{"mcpctl", "probe"}, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if !got {
				t.Fatal("no-color not set from NO_COLOR")
			}
		})
	}
}

// TestFailureEndsWithNextCommand: every failure tells the operator what to
// run next, in mcpctl's own words.
func TestFailureEndsWithNextCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"required flag", []string{"install"}, 2, []string{"install: --build PATH is required", "next: run `mcpctl install --help`"}},
		// Under --json the error is a JSON object naming the same.
		{"required flag after --json", []string{"--json", "canary", "start"}, 2, []string{`"message":"canary start: --build PATH is required"`, `"next":"mcpctl canary start --help"`}},
		{"stray argument", []string{"snapshot", "list", "extra"}, 2, []string{"next: run `mcpctl snapshot list --help`"}},
		{"unreadable config", []string{"--config", "/nonexistent/mcpctl.json", "snapshot", "list"}, 2, []string{"next: run `mcpctl --config FILE snapshot list`"}},
		{"required switch", []string{"cutover", "--build", "/x"}, 2, []string{"cutover: --arm-rollback (arm the automatic rollback before production restarts", "next: run `mcpctl cutover --help`"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, "`mcpctl ") && !strings.Contains(last, `"next":"mcpctl `) {
				t.Errorf("last line %q names no command to run", last)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
}
