package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// unitCalls is a UnitSystemd that records its calls.
type unitCalls struct {
	calls     []string
	single    string // UnitFileState's answer for every unit
	reloadErr error
}

func (f *unitCalls) DaemonReload(context.Context) error {
	f.calls = append(f.calls, "daemon-reload")
	return f.reloadErr
}

func (f *unitCalls) Enable(_ context.Context, us ...string) error {
	f.calls = append(f.calls, "enable "+strings.Join(us, " "))
	return nil
}

func (f *unitCalls) Disable(_ context.Context, us ...string) error {
	f.calls = append(f.calls, "disable "+strings.Join(us, " "))
	return nil
}

func (f *unitCalls) UnitFileState(context.Context, string) (string, error) { return f.single, nil }

// unitHost is a unit directory and an install root in a temp dir; with
// legacy, a host installed before the slots: release v1 current and the
// single unit's file installed.
func unitHost(t testing.TB, legacy bool) *ctlconfig.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := &ctlconfig.Config{UnitDir: filepath.Join(dir, "units")}
	cfg.Install.Root = filepath.Join(dir, "opt")
	cfg.Backend.Unit = "mcp-backend.service"
	if legacy {
		for _, p := range []string{filepath.Join(cfg.Install.Root, "releases", "v1"), cfg.UnitDir} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("releases/v1", filepath.Join(cfg.Install.Root, "current")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.UnitDir, cfg.Backend.Unit), []byte("[Service]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

var testUnits = []units.Unit{
	{Name: "a.socket", Content: []byte("[Socket]\nListenStream=1\n"), Enable: true},
	{Name: "b.service", Content: []byte("[Service]\nExecStart=/bin/true\n")},
}

func TestUnitInstallDryRun(t *testing.T) {
	tests := []struct {
		name      string
		legacy    bool
		installed []units.Unit // already in the unit directory
		changed   []string     // unit:action
		linked    []string
		disabled  []string
	}{
		{"fresh host", false, nil, []string{"a.socket:would create", "b.service:would create"}, nil, nil},
		{"one changed, one up to date", false,
			[]units.Unit{{Name: "a.socket", Content: []byte("[Socket]\n")}, testUnits[1]},
			[]string{"a.socket:would update"}, nil, nil},
		{"the single unit's host", true, nil, []string{"a.socket:would create", "b.service:would create"},
			units.Slots, []string{"mcp-backend.service"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unitHost(t, tc.legacy)
			if len(tc.installed) > 0 {
				if err := units.Write(cfg.UnitDir, tc.installed...); err != nil {
					t.Fatal(err)
				}
			}
			ui, err := CompareUnits(cfg, testUnits)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := ui.DryRun()
			if err != nil {
				t.Fatal(err)
			}
			var changed []string
			for _, c := range rep.Changed {
				changed = append(changed, c.Unit+":"+c.Action)
				if !strings.Contains(c.Diff, "(rendered)") {
					t.Errorf("%s: diff %q", c.Unit, c.Diff)
				}
			}
			if !rep.DryRun || rep.Reloaded || !slices.Equal(changed, tc.changed) || !slices.Equal(rep.Enabled, []string{"a.socket"}) ||
				!slices.Equal(rep.LinkedSlots, tc.linked) || !slices.Equal(rep.Disabled, tc.disabled) {
				t.Fatalf("DryRun = %+v", rep)
			}
			if len(rep.Changed)+len(rep.Unchanged) != len(testUnits) {
				t.Fatalf("changed %v and unchanged %v do not cover the units", changed, rep.Unchanged)
			}
			// Nothing written: the same comparison again.
			if again, _ := CompareUnits(cfg, testUnits); len(again.writes) != len(rep.Changed) {
				t.Fatalf("a dry run wrote units")
			}
			if _, err := os.Lstat(units.SlotLink(cfg.Install.Root, units.Slots[0])); !os.IsNotExist(err) {
				t.Fatalf("a dry run linked a slot: %v", err)
			}
		})
	}
}

func TestUnitInstallApply(t *testing.T) {
	tests := []struct {
		name      string
		legacy    bool
		upToDate  bool
		single    string // the single unit's UnitFileState
		reloadErr error
		changed   []string
		calls     []string
		linked    []string
		disabled  []string
		wantErr   string
	}{
		{"fresh host", false, false, "", nil, []string{"a.socket:created", "b.service:created"},
			[]string{"daemon-reload", "enable a.socket"}, nil, nil, ""},
		{"up to date: no reload", false, true, "", nil, nil, []string{"enable a.socket"}, nil, nil, ""},
		{"the single unit enabled: disabled, reloaded", true, false, "enabled", nil,
			[]string{"a.socket:created", "b.service:created"},
			[]string{"daemon-reload", "enable a.socket", "disable mcp-backend.service", "daemon-reload"},
			units.Slots, []string{"mcp-backend.service"}, ""},
		{"the single unit already disabled", true, true, "disabled", nil, nil, []string{"enable a.socket"}, units.Slots, nil, ""},
		{"reload fails", false, false, "", errors.New("bus gone"), nil, []string{"daemon-reload"}, nil, nil,
			"unit install: units written but bus gone; run systemctl daemon-reload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unitHost(t, tc.legacy)
			if tc.upToDate {
				if err := units.Write(cfg.UnitDir, testUnits...); err != nil {
					t.Fatal(err)
				}
			}
			ui, err := CompareUnits(cfg, testUnits)
			if err != nil {
				t.Fatal(err)
			}
			sd := &unitCalls{single: tc.single, reloadErr: tc.reloadErr}
			rep, err := ui.Apply(context.Background(), sd)
			if !slices.Equal(sd.calls, tc.calls) {
				t.Fatalf("calls %q, want %q", sd.calls, tc.calls)
			}
			if tc.wantErr != "" {
				if rep != nil || err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Apply = %+v, %v; want %q", rep, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var changed []string
			for _, c := range rep.Changed {
				changed = append(changed, c.Unit+":"+c.Action)
			}
			if rep.DryRun || rep.Reloaded != (len(tc.changed) > 0) || !slices.Equal(changed, tc.changed) ||
				!slices.Equal(rep.LinkedSlots, tc.linked) || !slices.Equal(rep.Disabled, tc.disabled) {
				t.Fatalf("Apply = %+v", rep)
			}
			if again, _ := CompareUnits(cfg, testUnits); len(again.writes) != 0 {
				t.Fatalf("units not written: %d still differ", len(again.writes))
			}
		})
	}
}
