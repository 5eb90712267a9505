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
