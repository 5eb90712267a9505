package status_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/systemd/unitstate/unitstatetest"
)

func TestPlanRollback(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	p := &state.Pending{SnapshotID: "s", Deadline: now.Add(90 * time.Second)}
	late := &state.Pending{SnapshotID: "s", Deadline: now.Add(-time.Minute)}
	tests := []struct {
		name      string
		in        status.RollbackView
		wantArmed bool
		wantState string
		wantLeft  time.Duration
	}{
		{"nothing", status.RollbackView{}, false, status.RollbackNone, 0},
		{"marker and timer", status.RollbackView{Pending: p, TimerState: "active"}, true, status.RollbackArmed, 90 * time.Second},
		{"marker after a reboot", status.RollbackView{Pending: p}, false, status.RollbackPendingNotArmed, 90 * time.Second},
		{"marker after the timer ran and failed", status.RollbackView{Pending: late, TimerState: "failed"}, false, status.RollbackPendingNotArmed, 0},
		{"deadline passed", status.RollbackView{Pending: late, TimerState: "active"}, true, status.RollbackArmed, 0},
		{"stray timer", status.RollbackView{TimerState: "active"}, true, status.RollbackStrayTimer, 0},
		{"unreadable marker", status.RollbackView{Err: "read pending-cutover.json: unexpected end of JSON input", TimerState: "active"}, true, status.RollbackMarkerUnreadable, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := status.PlanRollback(tc.in, now)
			if got.Armed != tc.wantArmed || got.State != tc.wantState || got.Left.D() != tc.wantLeft {
				t.Fatalf("armed %v state %s left %s, want %v %s %s", got.Armed, got.State, got.Left, tc.wantArmed, tc.wantState, tc.wantLeft)
			}
		})
	}
}

func TestDeployEvents(t *testing.T) {
	ev := func(a string) state.Event { return state.Event{Action: a} }
	all := []state.Event{ev(state.ActionCutover), ev(state.ActionArmed), ev(state.ActionRolledBack), ev(state.ActionWatchdog), ev(state.ActionRollbackFailed), ev(state.ActionCutover)}
	tests := []struct {
		name string
		n    int
		want []string
	}{
		{"all kept, newest first", 10, []string{"cutover", "rollback-failed", "rolled-back", "cutover"}},
		{"bounded", 2, []string{"cutover", "rollback-failed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range status.DeployEvents(all, tc.n) {
				got = append(got, e.Action)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGatherUnit(t *testing.T) {
	since := time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC)
	sd := unitstatetest.Fixed{
		"up.service":     {LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: 42, NRestarts: 2, ActiveEnterTimestamp: since},
		"down.service":   {LoadState: "loaded", ActiveState: "failed", SubState: "failed", ActiveEnterTimestamp: since},
		"broken.service": nil,
	}
	tests := []struct {
		name, unit string
		want       status.UnitView
	}{
		{"active, with since", "up.service", status.UnitView{Unit: "up.service", ActiveState: "active", SubState: "running", Since: since, NRestarts: 2, MainPID: 42}},
		{"not active: no since", "down.service", status.UnitView{Unit: "down.service", ActiveState: "failed", SubState: "failed"}},
		{"not installed", "absent.service", status.UnitView{Unit: "absent.service", ActiveState: "not installed"}},
		{"unreadable", "broken.service", status.UnitView{Unit: "broken.service", ActiveState: "unknown", Err: "D-Bus gone"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.GatherUnit(context.Background(), sd, tc.unit); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
