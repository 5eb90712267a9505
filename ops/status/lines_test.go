package status

import (
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/state"
)

// TestRollbackLine: the lines that need a human say so and what to run.
func TestRollbackLine(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	p := &state.Pending{SnapshotID: "s", Deadline: now.Add(90 * time.Second)}
	tests := []struct {
		name string
		in   RollbackView
		want string
	}{
		{"marker after a reboot", RollbackView{Pending: p}, "NOT ARMED"},
		{"unreadable marker", RollbackView{Err: "read pending-cutover.json: unexpected end of JSON input", TimerState: "active"}, "`mcpctl rollback --snapshot ID`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if line := PlanRollback(tc.in, now).Line(func(s ...string) string { return strings.Join(s, "") }); !strings.Contains(line, tc.want) {
				t.Fatalf("line %q lacks %q", line, tc.want)
			}
		})
	}
}

// TestCrashLoopLine: "crash loop: N starts in M s, next try in T", what
// failed and what to run.
func TestCrashLoopLine(t *testing.T) {
	failed := []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", Result: "signal"}, {Unit: "mcp-backend.socket", Result: "service-start-limit-hit"}}
	tests := []struct {
		name string
		in   CrashLoopView
		want []string
	}{
		{"down, the watchdog not yet run", CrashLoopView{Down: true, Failed: failed, Starts: 6, Window: millis.Duration(time.Minute)},
			[]string{"6 starts in 60 s, next try in the watchdog's next round", "DOWN", "mcp-backend.socket failed (service-start-limit-hit)", "`mcpctl recover`"}},
		{"down, backing off", CrashLoopView{Down: true, Failed: failed, Starts: 12, Window: millis.Duration(3 * time.Minute), Attempts: 2,
			LastOutcome: state.OutcomeFailed, LastError: "not ready", NextIn: millis.Duration(time.Minute)},
			[]string{"12 starts in 180 s, next try in 1m0s", "attempt 2 failed: not ready"}},
		{"recovered", CrashLoopView{Starts: 6, Window: millis.Duration(time.Minute), Attempts: 1, Recovered: time.Date(2026, 12, 6, 3, 32, 45, 0, time.UTC)},
			[]string{"6 starts in 60 s, recovered at ", "after 1 attempt(s) of the watchdog"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line := tc.in.Line(func(s ...string) string { return strings.Join(s, "") })
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Fatalf("line %q lacks %q", line, w)
				}
			}
		})
	}
}
