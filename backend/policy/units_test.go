package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// unitFiles lays out a unit directory: name -> "" for a unit file, a
// target for a symlink.
func unitFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, target := range files {
		p := filepath.Join(dir, name)
		var err error
		if target == "" {
			err = os.WriteFile(p, []byte("[Unit]\n"), 0o644)
		} else {
			err = os.Symlink(target, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestResolveUnitFromFiles: what the unit files' symlinks make of a name,
// as systemd loads it: aliases (chains too), templates' aliases for their
// instances; a masked unit and a linked unit file are no aliases.
func TestResolveUnitFromFiles(t *testing.T) {
	lib := unitFiles(t, map[string]string{
		"ssh.service":         "",
		"reboot.target":       "",
		"ctrl-alt-del.target": "reboot.target",
		"getty@.service":      "",
		"old-getty@.service":  "getty@.service",
		"a.service":           "b.service",
		"b.service":           "c.service",
		"c.service":           "",
		"loop1.service":       "loop2.service",
		"loop2.service":       "loop1.service",
		"odd.service":         "reboot.target",
	})
	etc := unitFiles(t, map[string]string{
		"sshd.service":   filepath.Join(lib, "ssh.service"),
		"masked.service": "/dev/null",
		"linked.service": "/opt/app/linked.service",
	})
	dirs := []string{etc, lib}
	for _, tc := range []struct {
		name, unit string
		want       []string // own name first
	}{
		{"a unit", "ssh.service", []string{"ssh.service"}},
		{"an alias in another directory", "sshd.service", []string{"ssh.service", "sshd.service"}},
		{"a shipped alias", "ctrl-alt-del.target", []string{"reboot.target", "ctrl-alt-del.target"}},
		{"a chain", "a.service", []string{"c.service", "a.service", "b.service"}},
		{"a loop ends", "loop1.service", []string{"loop2.service", "loop1.service"}},
		{"an instance of an aliased template", "old-getty@tty1.service", []string{"getty@tty1.service", "old-getty@tty1.service"}},
		{"an instance", "getty@tty1.service", []string{"getty@tty1.service"}},
		{"masked", "masked.service", []string{"masked.service"}},
		{"a linked unit file", "linked.service", []string{"linked.service"}},
		{"another type is no alias", "odd.service", []string{"odd.service"}},
		{"unknown", "nope.service", []string{"nope.service"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveUnit(context.Background(), tc.unit, dirs, nil)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("resolveUnit(%s) = %q, %v; want %q", tc.unit, got, err, tc.want)
			}
		})
	}
}

// TestUnitRulesMatchWhatSystemdActsOn: units rules are matched against
// the unit as systemd resolves it (the suffix systemctl adds, its own name
// and its aliases, an instance's template), whether systemd said so
// (Call.Units) or only the unit files; an allow rule only by the unit's
// own name.
func TestUnitRulesMatchWhatSystemdActsOn(t *testing.T) {
	p := mustNew(t, cfgOf(Allow,
		Rule{ID: "no-reboot", Action: Deny, Units: []string{"reboot.target", "ssh.service", "getty@.service"}},
		Rule{ID: "web", Action: Allow, Units: []string{"nginx.service"}},
	))
	strict := mustNew(t, cfgOf(Deny, Rule{ID: "web", Action: Allow, Units: []string{"nginx.service", "getty@.service"}}))
	for _, tc := range []struct {
		name  string
		p     *Policy
		unit  string
		units []string // as systemd resolved it
		want  Action
		rule  string
	}{
		{"the name", p, "reboot.target", nil, Deny, "no-reboot"},
		{"no suffix", p, "ssh", nil, Deny, "no-reboot"},
		{"an alias systemd resolves", p, "ctrl-alt-del.target", []string{"reboot.target", "ctrl-alt-del.target"}, Deny, "no-reboot"},
		{"another alias", p, "sshd.service", []string{"ssh.service", "sshd.service"}, Deny, "no-reboot"},
		{"an instance of a denied template", p, "getty@tty1.service", nil, Deny, "no-reboot"},
		{"an alias of an instance", p, "tty-one.service", []string{"getty@tty1.service", "tty-one.service"}, Deny, "no-reboot"},
		{"a unit whose alias is denied", p, "ssh.service", []string{"ssh.service", "sshd.service"}, Deny, "no-reboot"},
		{"another unit", p, "cron.service", []string{"cron.service"}, Allow, RuleDefault},
		{"allow by own name", strict, "nginx", nil, Allow, "web"},
		{"allow through an alias of the allowed unit", strict, "www.service", []string{"nginx.service", "www.service"}, Allow, "web"},
		{"no allow for what an allowed name aliases", strict, "nginx.service", []string{"evil.service", "nginx.service"}, Deny, RuleDefault},
		{"allow an instance by its template", strict, "getty@tty2.service", nil, Allow, "web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.Decide(Call{Tool: mcpwire.ToolServiceControl, Args: args(t, map[string]any{"unit": tc.unit, "action": "stop"}), Units: tc.units})
			if d.Action != tc.want || d.Rule != tc.rule {
				t.Fatalf("%s (%q): %s, want %s by %s", tc.unit, tc.units, d.Describe(), tc.want, tc.rule)
			}
		})
	}
}

// TestResolveUnitsAsksSystemd: ResolveUnits asks systemd only when a rule
// matches units, takes its Id as the unit's own name, and keeps what the
// files gave when systemd cannot be asked.
func TestResolveUnitsAsksSystemd(t *testing.T) {
	asked := 0
	sd := func(_ context.Context, unit string) (string, []string, error) {
		asked++
		if unit != "ctrl-alt-del.target" {
			t.Errorf("asked about %q", unit)
		}
		return "reboot.target", []string{"reboot.target", "ctrl-alt-del.target"}, nil
	}
	call := Call{Tool: mcpwire.ToolServiceStatus, Args: args(t, map[string]any{"unit": "ctrl-alt-del.target"})}
	none := mustNew(t, cfgOf(Ask, Rule{ID: "x", Action: Deny, Tools: []string{"service.*"}}))
	if err := none.ResolveUnits(context.Background(), &call, sd); err != nil || asked != 0 || call.Units != nil {
		t.Fatalf("without units rules: asked %d, units %q, %v", asked, call.Units, err)
	}
	p := mustNew(t, cfgOf(Allow, Rule{ID: "no-reboot", Action: Deny, Units: []string{"reboot.target"}}))
	if err := p.ResolveUnits(context.Background(), &call, sd); err != nil || asked != 1 || call.Units[0] != "reboot.target" {
		t.Fatalf("asked %d, units %q, %v", asked, call.Units, err)
	}
	if d := p.Decide(call); d.Action != Deny {
		t.Fatalf("%s", d.Describe())
	}
	call.Units = nil
	failing := func(context.Context, string) (string, []string, error) { return "", nil, errors.New("no bus") }
	if err := p.ResolveUnits(context.Background(), &call, failing); err == nil || len(call.Units) == 0 || call.Units[0] == "" {
		t.Fatalf("a failing systemd: units %q, %v", call.Units, err)
	}
}
