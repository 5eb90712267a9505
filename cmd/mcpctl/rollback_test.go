package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/status"
)

// TestRollbackStatusBrokenMarkerInRealSystemd: rollback status is what the
// HUMAN NEEDED message sends the operator to; with a pending marker it cannot
// read it still reports (exit 1), says what that means and what to run next,
// in text and in --json.
func TestRollbackStatusBrokenMarkerInRealSystemd(t *testing.T) {
	work := t.TempDir()
	mcpctl := filepath.Join(work, "bin", "mcpctl")
	nspawntest.CopyExecutable(t, nspawntest.BuildBinary(t, "./cmd/mcpctl", "v-rollback-test"), mcpctl)
	stateDir := filepath.Join(work, "state")
	conf := unitTestConfig(t, work, func(m map[string]any) { m["stateDir"] = stateDir })
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, state.PendingFile), []byte(`{"snapshotId": "2026`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{work}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, out, errOut, err := m.Run(ctx, append([]string{mcpctl, "--config", conf, "--no-color"}, args...)...)
		if err != nil {
			t.Fatalf("mcpctl %v: %v", args, err)
		}
		return code, out, errOut
	}

	code, out, errOut := run("rollback", "status")
	if code != outcome.Failed {
		t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, outcome.Failed, out, errOut)
	}
	for _, want := range []string{"UNKNOWN", "pending-cutover marker cannot be read", "timer not loaded", "`mcpctl rollback --snapshot ID`", "`mcpctl rollback disarm`"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "`mcpctl snapshot list`") {
		t.Errorf("stderr names no next command:\n%s", errOut)
	}

	code, out, _ = run("rollback", "status", "--json")
	var rv status.RollbackView
	if err := json.Unmarshal([]byte(out), &rv); err != nil || code != outcome.Failed {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if rv.State != status.RollbackMarkerUnreadable || rv.Err == "" || rv.Armed {
		t.Fatalf("rollback status --json = %+v, want state %s with the error", rv, status.RollbackMarkerUnreadable)
	}
}
