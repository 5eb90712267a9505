package deploy

import (
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

func TestDown(t *testing.T) {
	unit := func(name, active, result, status string, restarts uint32) *unitstate.State {
		return &unitstate.State{Name: name, LoadState: "loaded", ActiveState: active, Result: result, StatusText: status, NRestarts: restarts, InvocationID: "i-" + name}
	}
	const blue, green, sock = "mcp-backend@blue.service", "mcp-backend@green.service", "mcp-backend.socket"
	notFound := &unitstate.State{Name: "mcp-backend.service", LoadState: "not-found", ActiveState: "inactive"}
	tests := []struct {
		name   string
		socket *unitstate.State
		prod   []*unitstate.State
		down   string // the outage's failed units, "" for none
		starts int
	}{
		{"serving", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "active", "success", mcpwire.SlotAccepting, 0), unit(green, "inactive", "success", "", 0)}, "", 0},
		{"systemd restarting it", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "activating", "signal", "", 3), unit(green, "inactive", "", "", 0)}, "", 0},
		{"idle, socket listening", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "inactive", "", "", 0), unit(green, "inactive", "", "", 0)}, "", 0},
		{"socket stopped on purpose", unit(sock, "inactive", "success", "", 0), []*unitstate.State{notFound, unit(blue, "inactive", "", "", 0), unit(green, "inactive", "", "", 0)}, "", 0},
		{"crash loop: slot and socket failed", unit(sock, "failed", "service-start-limit-hit", "", 0), []*unitstate.State{notFound, unit(blue, "failed", "start-limit-hit", "", 5), unit(green, "inactive", "", "", 0)},
			"mcp-backend@blue.service failed (start-limit-hit), mcp-backend.socket failed (service-start-limit-hit)", 6},
		{"slot failed, socket still listening", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "failed", "exit-code", "", 2), unit(green, "inactive", "", "", 0)},
			"mcp-backend@blue.service failed (exit-code)", 3},
		{"failed beside a parked slot", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "active", "", mcpwire.SlotParked, 0), unit(green, "failed", "start-limit-hit", "", 5)},
			"mcp-backend@green.service failed (start-limit-hit)", 6},
		{"failed beside a parked slot still finishing calls", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "active", "", mcpwire.SlotParkedFinishing, 0), unit(green, "failed", "start-limit-hit", "", 5)},
			"mcp-backend@green.service failed (start-limit-hit)", 6},
		{"failed beside one serving", unit(sock, "active", "success", "", 0), []*unitstate.State{notFound, unit(blue, "active", "", mcpwire.SlotAccepting, 0), unit(green, "failed", "exit-code", "", 0)}, "", 0},
		{"socket failed, a slot still runs", unit(sock, "failed", "trigger-limit-hit", "", 0), []*unitstate.State{notFound, unit(blue, "active", "", mcpwire.SlotAccepting, 0), unit(green, "inactive", "", "", 0)},
			"mcp-backend.socket failed (trigger-limit-hit)", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := Down(tc.socket, tc.prod)
			got := ""
			if o != nil {
				got = o.String()
			}
			if got != tc.down {
				t.Fatalf("outage %q, want %q", got, tc.down)
			}
			if o != nil && o.Starts() != tc.starts {
				t.Fatalf("starts %d, want %d", o.Starts(), tc.starts)
			}
		})
	}
}

func TestPlanRecover(t *testing.T) {
	o := &Outage{Socket: "mcp-backend.socket", SocketState: "failed", Failed: []FailedUnit{{Unit: "mcp-backend@blue.service", Result: "start-limit-hit", NRestarts: 5}}}
	pending := &state.Pending{SnapshotID: "20261206T033000Z-1", Nonce: "n1", FromVersion: "v1", ToVersion: "v2"}
	tests := []struct {
		name     string
		o        *Outage
		pending  *state.Pending
		current  string
		act      bool
		snapshot string // the rollback's, "" for none
		release  string
		refusal  string
	}{
		{"not down", nil, nil, "v1", false, "", "", ""},
		{"not down, a cutover pending", nil, pending, "v2", false, "", "", ""},
		{"down: the current release again", o, nil, "v1", true, "", "v1", ""},
		{"down after an unconfirmed cutover: its snapshot", o, pending, "v2", true, pending.SnapshotID, "", ""},
		{"down and nothing installed", o, nil, "", false, "", "", "no current release"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanRecover(tc.o, tc.pending, tc.current)
			snap := ""
			if p.Rollback != nil {
				snap = p.Rollback.SnapshotID
				if p.Rollback.Nonce != tc.pending.Nonce || !p.Rollback.Act {
					t.Fatalf("rollback %+v: want it to act and clear the marker (nonce %s)", p.Rollback, tc.pending.Nonce)
				}
			}
			if p.Act != tc.act || snap != tc.snapshot || p.Release != tc.release || !strings.Contains(p.Refusal, tc.refusal) || (tc.refusal == "") != (p.Refusal == "") {
				t.Fatalf("plan %+v, want act %v snapshot %q release %q refusal %q", p, tc.act, tc.snapshot, tc.release, tc.refusal)
			}
		})
	}
}

func TestDownError(t *testing.T) {
	if err := DownError(nil, "x"); err != nil {
		t.Fatalf("no outage: %v, want nil", err)
	}
	err := DownError(&Outage{Failed: []FailedUnit{{Unit: "mcp-backend@blue.service", Result: "start-limit-hit"}}}, "no snapshot to restore")
	if CodeOf(err) != CodeFailed || !strings.Contains(err.Error(), "production is down") || !strings.Contains(err.Error(), "`mcpctl recover`") {
		t.Fatalf("%v (exit %d): want exit 1 saying production is down and naming mcpctl recover", err, CodeOf(err))
	}
}
