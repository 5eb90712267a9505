package main

import (
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/outcome"
)

// Refusals that must happen before any config, lock or systemd is touched.
func TestCutoverRollbackUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"cutover without --arm-rollback", []string{"cutover", "--build", "/nonexistent"}, outcome.Usage, "--arm-rollback"},
		{"cutover without --build", []string{"cutover", "--arm-rollback"}, outcome.Usage, "build"},
		{"cutover with an empty --build", []string{"cutover", "--build", "", "--arm-rollback"}, outcome.Usage, "--build: give the path"},
		{"install with an empty --build", []string{"install", "--build", " "}, outcome.Usage, "--build: give the path"},
		{"canary start with an empty --build", []string{"canary", "start", "--build", ""}, outcome.Usage, "--build: give the path"},
		{"cutover with an empty skip reason", []string{"cutover", "--build", "/x", "--arm-rollback", "--skip-canary-check", " "}, outcome.Usage, "reason"},
		{"rollback with a bad snapshot id", []string{"rollback", "--snapshot", "../../etc"}, outcome.Usage, "--snapshot"},
		{"rollback with a stray argument", []string{"rollback", "now"}, outcome.Usage, "status or disarm"},
		{"rollback --boot outside the boot-time check", []string{"rollback", "--boot"}, outcome.Usage, "--boot: only with --if-pending"},
		{"verify what", []string{"verify", "everything"}, outcome.Usage, "backend, tunnels or all"},
		{"missing named config", []string{"--config", "/nonexistent/mcpctl.json", "rollback", "status"}, outcome.Usage, "config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit = %d, want %d; stderr %s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr %q lacks %q", stderr, tc.want)
			}
		})
	}
}
