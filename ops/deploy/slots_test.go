package deploy

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
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
	fin := mcpwire.SlotParkedFinishing
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
		{"rollback before the confirmation, the old slot still finishing calls: it takes over again", []SlotFact{blue("active", fin, "v1"), green("active", acc, "v2")}, "v1",
			SlotPlan{Resume: "mcp-backend@blue.service", Old: []SlotFact{green("active", acc, "v2")}}},
		{"killed after the confirmation, the parked slot still finishing: stopped and used", []SlotFact{blue("active", fin, "v1"), green("active", acc, "v2")}, "v3",
			SlotPlan{StopFirst: []string{"mcp-backend@blue.service"}, Start: "blue", StartUnit: "mcp-backend@blue.service", Standby: true, Old: []SlotFact{green("active", acc, "v2")}}},
		{"a finishing parked slot of the target beside an accepting one: the accepting one stays", []SlotFact{blue("active", fin, "v2"), green("active", acc, "v2")}, "v2",
			SlotPlan{Keep: "mcp-backend@green.service", StopFirst: []string{"mcp-backend@blue.service"}}},
		{"a stopping finishing slot is not resumed", []SlotFact{blue("deactivating", fin, "v1"), green("active", acc, "v2")}, "v1",
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

// TestSlotPredicates: what each status of a running slot makes it.
func TestSlotPredicates(t *testing.T) {
	tests := []struct {
		state, status     string
		accepting, parked bool
	}{
		{"active", mcpwire.SlotAccepting, true, false},
		{"active", "", true, false}, // a build before the slots
		{"active", mcpwire.SlotStandby, false, false},
		{"active", mcpwire.SlotHandingOff, false, false},
		{"active", mcpwire.SlotParked, false, true},
		{"active", mcpwire.SlotParkedFinishing, false, true},
		{"deactivating", mcpwire.SlotParked, false, false},
		{"deactivating", mcpwire.SlotParkedFinishing, false, false},
		{"deactivating", mcpwire.SlotAccepting, false, false},
		{"inactive", mcpwire.SlotParkedFinishing, false, false},
	}
	for _, tc := range tests {
		f := SlotFact{Unit: "mcp-backend@blue.service", Slot: "blue", ActiveState: tc.state, StatusText: tc.status}
		if got := f.Accepting(); got != tc.accepting {
			t.Errorf("%s %q: Accepting = %v, want %v", tc.state, tc.status, got, tc.accepting)
		}
		if got := f.Parked(); got != tc.parked {
			t.Errorf("%s %q: Parked = %v, want %v", tc.state, tc.status, got, tc.parked)
		}
	}
}

// slotSystemd plays one slot's statuses: each read of the unit takes the
// next of statuses (the last repeats); Stop records the status it stopped.
type slotSystemd struct {
	Systemd
	mu        sync.Mutex
	statuses  []string
	reads     int
	killed    []syscall.Signal
	stoppedAt string
	stops     int
}

func (f *slotSystemd) Unit(_ context.Context, unit string) (*unitstate.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.statuses[min(f.reads, len(f.statuses)-1)]
	f.reads++
	active := "active"
	if f.stops > 0 {
		active = "inactive"
	}
	return &unitstate.State{Name: unit, LoadState: "loaded", ActiveState: active, StatusText: st, MainPID: 7}, nil
}

func (f *slotSystemd) Kill(_ context.Context, _ string, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, sig)
	return nil
}

func (f *slotSystemd) Stop(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stoppedAt = f.statuses[min(f.reads, len(f.statuses))-1]
	f.stops++
	return nil
}

func (f *slotSystemd) ResetFailed(context.Context, string) error { return nil }

// TestSlotStoppedOnceItsCallsAreAnswered: a slot parked with calls it
// accepted before the handoff still running is stopped only once it says
// they are answered, by the rollback's handoff and by stopParked after a
// confirmation alike.
func TestSlotStoppedOnceItsCallsAreAnswered(t *testing.T) {
	const unit = "mcp-backend@green.service"
	acc, off, fin, park := mcpwire.SlotAccepting, mcpwire.SlotHandingOff, mcpwire.SlotParkedFinishing, mcpwire.SlotParked
	t.Run("handoff without keep", func(t *testing.T) {
		sd := &slotSystemd{statuses: []string{off, fin, fin, fin, park}}
		e := &Env{Systemd: sd}
		parked, warn, err := e.handOff(context.Background(), SlotFact{Unit: unit, Slot: "green", ActiveState: "active", StatusText: acc}, false)
		if err != nil || parked || warn != "" {
			t.Fatalf("handOff = %v, %q, %v; want stopped, no warning", parked, warn, err)
		}
		if !reflect.DeepEqual(sd.killed, []syscall.Signal{syscall.SIGUSR2}) || sd.stops != 1 || sd.stoppedAt != park {
			t.Fatalf("killed %v, stopped %d times at %q; want SIGUSR2, then stopped once parked", sd.killed, sd.stops, sd.stoppedAt)
		}
	})
	t.Run("handoff with keep leaves it finishing", func(t *testing.T) {
		sd := &slotSystemd{statuses: []string{fin}}
		e := &Env{Systemd: sd}
		parked, warn, err := e.handOff(context.Background(), SlotFact{Unit: unit, Slot: "green", ActiveState: "active", StatusText: acc}, true)
		if err != nil || !parked || warn != "" || sd.stops != 0 {
			t.Fatalf("handOff = %v, %q, %v, %d stops; want parked, kept", parked, warn, err, sd.stops)
		}
	})
	t.Run("stopParked after the confirmation", func(t *testing.T) {
		sd := &slotSystemd{statuses: []string{fin, fin, park}}
		e := &Env{Systemd: sd}
		warns, err := e.stopParked(context.Background(), []string{unit})
		if err != nil || len(warns) != 0 || sd.stops != 1 || sd.stoppedAt != park {
			t.Fatalf("stopParked = %q, %v; stopped %d times at %q; want stopped once parked", warns, err, sd.stops, sd.stoppedAt)
		}
	})
	t.Run("calls that never end: a warning naming the unit", func(t *testing.T) {
		sd := &slotSystemd{statuses: []string{fin}}
		e := &Env{Systemd: sd}
		start := time.Now()
		warn := e.waitFinished(context.Background(), unit, 200*time.Millisecond)
		if !strings.Contains(warn, unit) || !strings.Contains(warn, "cut") {
			t.Fatalf("warning %q; want one naming %s and the cut calls", warn, unit)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
			t.Fatalf("waited %s; want the bound", d)
		}
	})
	t.Run("a slot no longer running is not waited for", func(t *testing.T) {
		sd := &slotSystemd{statuses: []string{fin}, stops: 1}
		e := &Env{Systemd: sd}
		if warn := e.waitFinished(context.Background(), unit, time.Minute); warn != "" || sd.reads != 1 {
			t.Fatalf("warning %q after %d reads; want none after one", warn, sd.reads)
		}
	})
}
