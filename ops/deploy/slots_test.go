package deploy

import (
	"reflect"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestPlanSlots: the takeover plan over every state production can be
// found in (at rest, upgraded from the single unit, left by an interrupted
// run, after a reboot that started both).
func TestPlanSlots(t *testing.T) {
	const svc = "mcp-backend.service"
	blue := func(state, status, rel string) SlotFact {
		return SlotFact{Unit: "mcp-backend@blue.service", Slot: "blue", ActiveState: state, StatusText: status, Release: rel}
	}
	green := func(state, status, rel string) SlotFact {
		return SlotFact{Unit: "mcp-backend@green.service", Slot: "green", ActiveState: state, StatusText: status, Release: rel}
	}
	legacy := func(state, rel string) SlotFact {
		return SlotFact{Unit: svc, ActiveState: state, Release: rel}
	}
	acc, stb, off, park := mcpwire.SlotAccepting, mcpwire.SlotStandby, mcpwire.SlotHandingOff, mcpwire.SlotParked
	tests := []struct {
		name   string
		facts  []SlotFact
		target string
		want   SlotPlan
	}{
		{"at rest on blue: green in standby beside it", []SlotFact{blue("active", acc, "v1"), green("inactive", "", "v1")}, "v2",
			SlotPlan{Start: "green", StartUnit: "mcp-backend@green.service", Standby: true, Old: []SlotFact{blue("active", acc, "v1")}}},
		{"at rest on green: blue", []SlotFact{blue("inactive", "", "v2"), green("active", acc, "v2")}, "v3",
			SlotPlan{Start: "blue", StartUnit: "mcp-backend@blue.service", Standby: true, Old: []SlotFact{green("active", acc, "v2")}}},
		{"legacy unit serving: blue beside it, legacy named", []SlotFact{legacy("active", "v1"), blue("inactive", "", ""), green("inactive", "", "")}, "v2",
			SlotPlan{Start: "blue", StartUnit: "mcp-backend@blue.service", Standby: true, Old: []SlotFact{legacy("active", "v1")}, Legacy: svc}},
		{"legacy unit on its own port (before the socket): it stops first, blue starts alone",
			[]SlotFact{{Unit: svc, ActiveState: "active", Release: "v1", OwnPort: true}, blue("inactive", "", ""), green("inactive", "", "")}, "v2",
			SlotPlan{StopFirst: []string{svc}, Start: "blue", StartUnit: "mcp-backend@blue.service", Legacy: svc}},
		{"nothing runs: the boot slot starts, no standby", []SlotFact{blue("inactive", "", "v1"), green("failed", "", "v1")}, "v1",
			SlotPlan{Start: "blue", StartUnit: "mcp-backend@blue.service"}},
		{"rollback: the serving slot already runs the target", []SlotFact{blue("active", acc, "v1"), green("inactive", "", "v2")}, "v1",
			SlotPlan{Keep: "mcp-backend@blue.service"}},
		{"killed after the takeover: keep the old, hand the new off", []SlotFact{blue("active", acc, "v1"), green("active", acc, "v2")}, "v1",
			SlotPlan{Keep: "mcp-backend@blue.service", Old: []SlotFact{green("active", acc, "v2")}}},
		{"killed in standby: stop the standby, start it again", []SlotFact{blue("active", acc, "v1"), green("active", stb, "v2")}, "v2",
			SlotPlan{StopFirst: []string{"mcp-backend@green.service"}, Start: "green", StartUnit: "mcp-backend@green.service", Standby: true, Old: []SlotFact{blue("active", acc, "v1")}}},
		{"killed during the handoff: the new one is kept", []SlotFact{blue("deactivating", off, "v1"), green("active", acc, "v2")}, "v2",
			SlotPlan{Keep: "mcp-backend@green.service", StopFirst: []string{"mcp-backend@blue.service"}}},
		{"rollback before the confirmation: the parked old slot takes over again", []SlotFact{blue("active", park, "v1"), green("active", acc, "v2")}, "v1",
			SlotPlan{Resume: "mcp-backend@blue.service", Old: []SlotFact{green("active", acc, "v2")}}},
		{"killed after the confirmation: the parked slot is stopped and used", []SlotFact{blue("active", park, "v1"), green("active", acc, "v2")}, "v3",
			SlotPlan{StopFirst: []string{"mcp-backend@blue.service"}, Start: "blue", StartUnit: "mcp-backend@blue.service", Standby: true, Old: []SlotFact{green("active", acc, "v2")}}},
		{"a parked slot of the target beside an accepting one: the accepting one stays", []SlotFact{blue("active", park, "v2"), green("active", acc, "v2")}, "v2",
			SlotPlan{Keep: "mcp-backend@green.service", StopFirst: []string{"mcp-backend@blue.service"}}},
		{"a stopping parked slot is not resumed", []SlotFact{blue("deactivating", park, "v1"), green("active", acc, "v2")}, "v1",
			SlotPlan{StopFirst: []string{"mcp-backend@blue.service"}, Start: "blue", StartUnit: "mcp-backend@blue.service", Standby: true, Old: []SlotFact{green("active", acc, "v2")}}},
		{"both accept, neither the target: refused", []SlotFact{blue("active", acc, "v1"), green("active", acc, "v2")}, "v3",
			SlotPlan{Old: []SlotFact{blue("active", acc, "v1"), green("active", acc, "v2")},
				Refusal: "both slots of mcp-backend.service accept and neither runs v3: run `mcpctl status` and `mcpctl rollback --last`"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanSlots(svc, tc.facts, tc.target); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PlanSlots =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}
