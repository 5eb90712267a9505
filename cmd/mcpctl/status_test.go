package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/server"
	"github.com/overdeck/mcp-backend/internal/jsoncheck"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/ops/view"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/systemd/unitstate/unitstatetest"
	"github.com/overdeck/mcp-backend/units"
)

// TestStatusAssembly gathers status from a real backend handler, a stored
// marker and audit, and fixed unit states, and renders it.
func TestStatusAssembly(t *testing.T) {
	srv, err := server.New(config.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	cfg := ctlconfig.Default()
	cfg.Backend.Listen = strings.TrimPrefix(ts.URL, "http://")
	cfg.Canary.Listen = "127.0.0.1:1"
	cfg.StateDir = t.TempDir()
	cfg.Install.Root = t.TempDir()
	cfg.Tunnels[0].URL = ts.URL
	cfg.Tunnels[1].URL = "http://127.0.0.1:1"
	now := time.Now()
	if err := state.Dir(cfg.StateDir).WritePending(&state.Pending{SnapshotID: "20250101T000000Z-abcd", Nonce: "0123456789abcdef0123456789abcdef",
		FromVersion: "v1", ToVersion: "v2", ArmedAt: now, Deadline: now.Add(time.Minute), TimerUnit: "mcpctl-rollback.timer", ServiceUnit: "mcpctl-rollback.service"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []state.Event{
		{Action: state.ActionCutover, FromVersion: "v0", ToVersion: "v1", Outcome: state.OutcomeOK},
		{Action: state.ActionArmed, Outcome: state.OutcomeOK},
		{Action: state.ActionRolledBack, ToVersion: "v0", Outcome: state.OutcomeFailed, Reason: "why not"},
	} {
		if err := state.Dir(cfg.StateDir).Audit(e); err != nil {
			t.Fatal(err)
		}
	}
	since := now.Add(-time.Hour)
	sd := unitstatetest.Fixed{
		cfg.Backend.Unit:        {LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: 42, NRestarts: 2, ActiveEnterTimestamp: since},
		cfg.Tunnels[0].Unit:     {LoadState: "loaded", ActiveState: "active", ActiveEnterTimestamp: since},
		cfg.Tunnels[1].Unit:     nil,
		"mcpctl-rollback.timer": {LoadState: "loaded", ActiveState: "active"},
	}
	v, _ := verify.ForBackend("")
	r := status.Gather(context.Background(), cfg, sd, v, now)

	p := r.Production
	if p.ActiveState != "active" || p.NRestarts != 2 || !p.Since.Equal(since) || p.Healthz != 200 || p.Readyz != 200 {
		t.Errorf("production = %+v", p)
	}
	if p.VersionFrom != "system.info" || p.Version == "" {
		t.Errorf("production version %q from %q, want system.info", p.Version, p.VersionFrom)
	}
	if p.Admission == nil || p.Admission.Limits.MaxActive == 0 {
		t.Errorf("admission snapshot = %+v, want the backend's limits", p.Admission)
	}
	if r.Canary.ActiveState != "not installed" || r.Canary.Healthz != 0 {
		t.Errorf("canary = %+v", r.Canary)
	}
	if len(r.Tunnels) != 2 || r.Tunnels[0].Healthz != 200 || r.Tunnels[1].Healthz != 0 || r.Tunnels[1].Err == "" {
		t.Errorf("tunnels = %+v", r.Tunnels)
	}
	if !r.Rollback.Armed || r.Rollback.TimerState != "active" || r.Rollback.Left.D() != time.Minute {
		t.Errorf("rollback = %+v", r.Rollback)
	}
	if len(r.Events) != 2 || r.Events[0].Action != state.ActionRolledBack {
		t.Errorf("events = %+v", r.Events)
	}

	var out bytes.Buffer
	view.Status(&out, plainStyles(), r, textWidth)
	// Every line fits 80 columns (a tunnel line was ~136).
	for _, line := range strings.Split(out.String(), "\n") {
		if len(line) > textWidth {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
	}
	var wide bytes.Buffer
	view.Status(&wide, plainStyles(), r, 0)
	if !strings.Contains(wide.String(), "production mcp-backend.service active since") {
		t.Errorf("--wide keeps since on the unit's line:\n%s", wide.String())
	}
	for _, want := range []string{
		"production mcp-backend.service active, restarts 2", "  since ", "(system.info)", "/healthz 200 /readyz 200", "admission active 0/", "flows 0 busy of 1 conversations (1 principals)",
		"canary mcp-backend-canary.service not installed",
		"tunnel Overdeck", "/healthz no answer", "D-Bus gone",
		"rollback ARMED cutover v1 -> v2, snapshot 20250101T000000Z-abcd, 1m0s left\n    (mcpctl-rollback.timer)",
		"rolled-back     failed - -> v0  why not", "cutover         ok v0 -> v1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("plain output has escape codes:\n%s", out.String())
	}
}

func plainStyles() styles { return newOutput(&bytes.Buffer{}, false, true).St }

// TestDegradedWithoutSystemd: with no system bus, status and verify backend
// still run their HTTP checks against a real backend and say which parts
// need systemd (before, both stopped at "connect to systemd" and suggested
// status, which stopped there too).
func TestDegradedWithoutSystemd(t *testing.T) {
	srv, err := server.New(config.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	dir := t.TempDir()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "no-bus"))
	backendCfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(backendCfg, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := unitTestConfig(t, dir, func(m map[string]any) {
		m["stateDir"] = filepath.Join(dir, "state")
		m["backend"] = map[string]any{"listen": strings.TrimPrefix(ts.URL, "http://"), "config": backendCfg}
		m["canary"] = map[string]any{"listen": "127.0.0.1:1"}
	})
	code, out, errb := runCLI(t, "--config", conf, "status")
	for _, want := range []string{"degraded: systemd not reachable", ts.URL + " /healthz 200 /readyz 200", "whether a timer is armed is unknown"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status: exit %d, want 0 and %q:\n%s%s", code, want, out, errb)
		}
	}
	code, out, errb = runCLI(t, "--config", conf, "status", "--json")
	var rep status.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.SystemdErr == "" || rep.Production.Healthz != 200 {
		t.Fatalf("status --json: exit %d %s%s", code, out, errb)
	}
	if bad, err := jsoncheck.Durations([]byte(out)); err != nil || len(bad) > 0 {
		t.Fatalf("status --json durations: %v %v", bad, err)
	}
	code, out, errb = runCLI(t, "--config", conf, "verify", "backend")
	if code != 1 || !strings.Contains(out, "HTTP checks ok, INCOMPLETE") || !strings.Contains(out, "not checked: the backend unit") {
		t.Fatalf("verify backend: exit %d:\n%s%s", code, out, errb)
	}
	if strings.Contains(errb, "next: run `mcpctl status`") && strings.Contains(errb, "connect to systemd") {
		t.Fatalf("hint loop: %s", errb)
	}
	// rollback status shows the marker, and says the timer is unknown.
	code, out, errb = runCLI(t, "--config", conf, "rollback", "status")
	if code != 1 || !strings.Contains(out, "rollback timer unknown (needs systemd") || !strings.Contains(out, "pending cutover: none") {
		t.Fatalf("rollback status: exit %d:\n%s%s", code, out, errb)
	}
	// Negative control: a backend that is down fails the HTTP checks.
	ts.Close()
	code, out, _ = runCLI(t, "--config", conf, "verify", "backend")
	if code != 1 || !strings.Contains(out, "FAILED") {
		t.Fatalf("verify backend of a closed server: exit %d:\n%s", code, out)
	}
}

// TestStatusShowsTheSlotBeside: during a cutover the old slot is parked
// until the confirmation; status names the serving slot as production and
// the parked one beside it.
func TestStatusShowsTheSlotBeside(t *testing.T) {
	cfg := ctlconfig.Default()
	cfg.Backend.Listen, cfg.Canary.Listen = "127.0.0.1:1", "127.0.0.1:1"
	cfg.Tunnels[0].URL, cfg.Tunnels[1].URL = "", ""
	cfg.StateDir, cfg.Install.Root = t.TempDir(), t.TempDir()
	blue, green := units.SlotUnit(cfg.Backend.Unit, units.SlotBlue), units.SlotUnit(cfg.Backend.Unit, units.SlotGreen)
	tests := []struct {
		name        string
		blue, green *unitstate.State
		serving     string
		beside      []status.BesideView
	}{
		{"at rest", &unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotAccepting, MainPID: 7},
			&unitstate.State{LoadState: "loaded", ActiveState: "inactive"}, blue, nil},
		{"parked until confirmed", &unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotParked, MainPID: 7},
			&unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotAccepting, MainPID: 9}, green,
			[]status.BesideView{{Unit: blue, ActiveState: "active", Status: mcpwire.SlotParked, MainPID: 7}}},
		{"parked, still finishing calls accepted before the handoff", &unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotParkedFinishing, MainPID: 7},
			&unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotAccepting, MainPID: 9}, green,
			[]status.BesideView{{Unit: blue, ActiveState: "active", Status: mcpwire.SlotParkedFinishing, MainPID: 7}}},
		{"standby being verified", &unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotAccepting, MainPID: 7},
			&unitstate.State{LoadState: "loaded", ActiveState: "active", StatusText: mcpwire.SlotStandby, MainPID: 9}, blue,
			[]status.BesideView{{Unit: green, ActiveState: "active", Status: mcpwire.SlotStandby, MainPID: 9}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sd := unitstatetest.Fixed{units.Socket(cfg.Backend.Unit): {LoadState: "loaded", ActiveState: "active"}, blue: tc.blue, green: tc.green}
			v, _ := verify.ForBackend("")
			r := status.Gather(context.Background(), cfg, sd, v, time.Now())
			if r.Production.Unit != tc.serving || fmt.Sprint(r.Beside) != fmt.Sprint(tc.beside) {
				t.Fatalf("production %s beside %+v, want %s beside %+v", r.Production.Unit, r.Beside, tc.serving, tc.beside)
			}
			var out bytes.Buffer
			view.Status(&out, plainStyles(), r, textWidth)
			// A long status wraps: compared with the lines joined.
			joined := strings.Join(strings.Fields(out.String()), " ")
			for _, b := range tc.beside {
				if want := "beside it: " + b.Unit + " " + b.Status; !strings.Contains(joined, want) {
					t.Errorf("status lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
