package main

import (
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/outcome"
)

func TestInstallCanaryUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"install without build", []string{"install"}, outcome.Usage, "--build PATH is required"},
		{"canary start without build", []string{"canary", "start"}, outcome.Usage, "--build PATH is required"},
		{"missing named config", []string{"--config", "/nonexistent/mcpctl.json", "canary", "status"}, outcome.Usage, "config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}
