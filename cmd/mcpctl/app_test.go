package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
