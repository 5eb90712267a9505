package status_test

import (
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
)

func TestPlanCrashLoop(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 40, 0, 0, time.UTC)
	o := &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", Result: "signal", NRestarts: 5}, {Unit: "mcp-backend.socket", Result: "service-start-limit-hit"}}}
	rec := &state.Recovery{Since: now.Add(-3 * time.Minute), Starts: 12, Failure: o.ID(), FirstFailure: now.Add(-3 * time.Minute), LastFailure: now.Add(-time.Minute),
		Attempts: 2, LastAttempt: now.Add(-time.Minute), LastOutcome: state.OutcomeFailed, NextTry: now.Add(30 * time.Second)}
	o2 := &deploy.Outage{Failed: []deploy.FailedUnit{{Unit: "mcp-backend@blue.service", Result: "signal", NRestarts: 5, InvocationID: "later"}}}
	recovered := *rec
	recovered.Recovered, recovered.LastOutcome = now.Add(-time.Minute), state.OutcomeOK
	tests := []struct {
		name           string
		o              *deploy.Outage
		r              *state.Recovery
		nilView, down  bool
		starts         int
		window, nextIn time.Duration
	}{
		{"nothing", nil, nil, true, false, 0, 0, 0},
		{"down, the watchdog has not run", o, nil, false, true, 6, 60 * time.Second, 0},
		{"down, backing off", o, rec, false, true, 12, 60*time.Second + 2*time.Minute, 30 * time.Second},
		{"recovered", nil, &recovered, false, false, 12, 60*time.Second + 2*time.Minute, 0},
		{"down again, the watchdog has not seen it", o2, &recovered, false, true, 18, 60*time.Second + 3*time.Minute, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := status.PlanCrashLoop(tc.o, tc.r, now)
			if tc.nilView {
				if v != nil {
					t.Fatalf("view %+v, want none", v)
				}
				return
			}
			if v == nil || v.Down != tc.down || v.Starts != tc.starts || v.Window.D() != tc.window || v.NextIn.D() != tc.nextIn {
				t.Fatalf("view %+v, want down %v, %d starts in %s, next in %s", v, tc.down, tc.starts, tc.window, tc.nextIn)
			}
		})
	}
}
