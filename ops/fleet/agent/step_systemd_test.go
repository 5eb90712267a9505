package agent

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
)

// runVolatile are the properties that differ between any two runs of the
// same unit: who and when, what it has used so far.
var runVolatile = regexp.MustCompile(`^(Id|Names|InvocationID|ControlGroup|ControlGroupId|MainPID|ExecMainPID|ExecMainStartTimestamp.*|.*Timestamp|.*TimestampMonotonic|(Memory|Tasks|IP|IO|CPUUsage|Effective).*(Current|Peak|NSec|Bytes|Packets|Operations)|PIDFile|StateChangeTimestamp.*)$`)

// unordered are the dependency lists: sets, shown in no fixed order.
var unordered = regexp.MustCompile(`^(After|Before|Requires|Requisite|Wants|BindsTo|PartOf|Upholds|Conflicts|RequiredBy|RequisiteOf|WantedBy|BoundBy|UpheldBy|ConsistsOf|ConflictedBy|OnFailure|OnSuccess|Triggers|TriggeredBy|PropagatesReloadTo|ReloadPropagatedFrom|JoinsNamespaceOf|RequiresMountsFor)$`)

// execRun are an ExecStart line's fields of one run (its start time and
// pid), not of the unit.
var execRun = regexp.MustCompile(`(start_time|stop_time|pid|code|status)=[^;]*`)

// TestStepUnitAsSystemdRunMadeIt: the step's unit, started through the one
// D-Bus client, shows systemctl the same properties as the unit systemd-run
// made of the same step with the argv the agent exec'd before, but for its
// name and what changes from run to run.
func TestStepUnitAsSystemdRunMadeIt(t *testing.T) {
	dir := t.TempDir()
	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{dir}})
	// A stand-in for mcpctl that stays up, so both units can be read while
	// active (a finished step's unit is collected at once).
	self := filepath.Join(dir, "mcpctl")
	if err := os.WriteFile(self, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	step, err := ParseStep([]string{"--config", filepath.Join(dir, "mcpctl.json"), "--json", "--no-color", "cutover", "--build", "/b", "--arm-rollback"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	viaDBus := &Start{FleetDir: dir, ID: "r1-host1-dbus-cutover", Step: step}
	if err := m.Client.StartTransientService(ctx, stepService(viaDBus, self)); err != nil {
		t.Fatal(err)
	}
	viaRun := &Start{FleetDir: dir, ID: "r1-host1-run-cutover", Step: step}
	ex := &Exec{FleetDir: viaRun.FleetDir, ID: viaRun.ID, Step: viaRun.Step}
	argv := append([]string{"systemd-run", "--unit=" + StepUnit(viaRun.ID), "--collect", "--quiet", "--service-type=exec",
		"--description=mcpctl fleet step " + viaRun.ID, "--", self}, ex.Words()...)
	if out, err := m.Exec(ctx, argv...); err != nil {
		t.Fatalf("systemd-run: %v\n%s", err, out)
	}

	show := func(s *Start) map[string]string {
		out, err := m.Exec(ctx, "systemctl", "show", StepUnit(s.ID))
		if err != nil {
			t.Fatalf("systemctl show: %v\n%s", err, out)
		}
		props := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(line, "=")
			if runVolatile.MatchString(k) {
				continue
			}
			if unordered.MatchString(k) {
				f := strings.Fields(v)
				slices.Sort(f)
				v = strings.Join(f, " ")
			}
			if strings.HasPrefix(k, "ExecStart") {
				v = execRun.ReplaceAllString(v, "$1=")
			}
			props[k] = strings.ReplaceAll(v, s.ID, "ID")
		}
		return props
	}
	got, want := show(viaDBus), show(viaRun)
	if got["ActiveState"] != "active" || got["Type"] != "exec" || got["CollectMode"] != "inactive-or-failed" {
		t.Fatalf("the step's unit: %s, Type=%s, CollectMode=%s; want active, exec, inactive-or-failed", got["ActiveState"], got["Type"], got["CollectMode"])
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %q over D-Bus, %q by systemd-run", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %q over D-Bus, not shown for systemd-run's", k, g)
		}
	}
}
