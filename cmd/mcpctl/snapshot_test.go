package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
)

// snapEnv is a host in a temp dir with production on v1 and an mcpctl.json
// pointing at it.
type snapEnv struct {
	cfgPath, stateDir, configFile string
	store                         *release.Store
}

func newSnapEnv(t testing.TB) *snapEnv {
	t.Helper()
	root := t.TempDir()
	e := &snapEnv{
		cfgPath:    filepath.Join(root, "mcpctl.json"),
		stateDir:   filepath.Join(root, "state"),
		configFile: filepath.Join(root, "etc/config.json"),
		store:      &release.Store{Root: filepath.Join(root, "opt")},
	}
	unitDir := filepath.Join(root, "units")
	cfg := map[string]any{
		"backend":  map[string]any{"config": e.configFile},
		"canary":   map[string]any{"config": filepath.Join(root, "etc/canary.json")},
		"install":  map[string]any{"root": e.store.Root, "keepReleases": 2},
		"unitDir":  unitDir,
		"stateDir": e.stateDir,
	}
	b, _ := json.Marshal(cfg)
	snapWrite(t, e.cfgPath, string(b), 0o644)
	snapWrite(t, e.configFile, "{}\n", 0o640)
	snapWrite(t, filepath.Join(unitDir, "mcp-backend.service"), "[Service]\n", 0o644)
	snapWrite(t, filepath.Join(unitDir, "mcp-backend.service.d/10-limits.conf"), "[Service]\nTasksMax=512\n", 0o644)
	build := filepath.Join(root, "build")
	snapWrite(t, build, "#!/bin/sh\n", 0o755)
	if _, _, err := e.store.Install("v1", build); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	return e
}

func snapWrite(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func (e *snapEnv) run(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, append([]string{"--config", e.cfgPath}, args...)...)
}

// create makes a snapshot through the CLI and returns its id.
func (e *snapEnv) create(t testing.TB, reason string) string {
	t.Helper()
	code, out, errOut := e.run(t, "--json", "snapshot", "create", "--reason", reason)
	if code != outcome.OK {
		t.Fatalf("snapshot create: exit %d: %s", code, errOut)
	}
	var m snapshot.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("create --json output %q: %v", out, err)
	}
	return m.ID
}

func TestSnapshotCreateListShow(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create(t, "before cutover")

	// The audit record names the snapshot.
	events, err := state.Dir(e.stateDir).Tail(5)
	if err != nil || len(events) != 1 || events[0].Action != state.ActionSnapshot || events[0].SnapshotID != id {
		t.Fatalf("audit = %+v, %v", events, err)
	}

	code, out, _ := e.run(t, "snapshot", "list", "--json")
	if code != outcome.OK {
		t.Fatalf("list exit %d", code)
	}
	var list []snapshot.ListEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].Version != "v1" || list[0].Files != 6 || list[0].Reason != "before cutover" {
		t.Fatalf("list = %+v", list)
	}

	code, out, _ = e.run(t, "snapshot", "list")
	if code != outcome.OK || !strings.Contains(out, id) || !strings.Contains(out, "before cutover") || strings.Contains(out, "\x1b[") {
		t.Fatalf("human list (exit %d) should be plain text naming the snapshot:\n%s", code, out)
	}

	code, out, _ = e.run(t, "snapshot", "show", id)
	if code != outcome.OK {
		t.Fatalf("show exit %d:\n%s", code, out)
	}
	for _, want := range []string{"integrity", "ok", e.configFile, "10-limits.conf", "0640", "releases/v1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
}

func TestSnapshotShowCorrupt(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create(t, "x")
	m, err := snapshot.Load(e.stateDir, id)
	if err != nil {
		t.Fatal(err)
	}
	stored := filepath.Join(m.Dir, m.Files[0].Stored)
	b, _ := os.ReadFile(stored)
	b[0] ^= 0xff
	if err := os.WriteFile(stored, b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(t, "--json", "snapshot", "show", id)
	if code != outcome.Failed {
		t.Fatalf("show of a corrupt snapshot: exit %d, want %d", code, outcome.Failed)
	}
	var res struct {
		ID          string `json:"id"`
		Verified    bool   `json:"verified"`
		VerifyError string `json:"verifyError"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("show --json %q: %v", out, err)
	}
	if res.ID != id || res.Verified || !strings.Contains(res.VerifyError, "corrupt") || !strings.Contains(errOut, "corrupt") {
		t.Fatalf("show = %+v, stderr %q", res, errOut)
	}
}

func TestSnapshotUsageAndFailures(t *testing.T) {
	e := newSnapEnv(t)
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"show without id", []string{"snapshot", "show"}, outcome.Usage, "ID"},
		{"show with a path for an id", []string{"snapshot", "show", "../../etc"}, outcome.Usage, "snapshot id"},
		{"show unknown", []string{"snapshot", "show", "20261202T141500Z-abcdef"}, outcome.Failed, "not found"},
		{"negative keep", []string{"snapshot", "prune", "--keep", "-1"}, outcome.Usage, "--keep"},
		{"stray argument", []string{"snapshot", "list", "extra"}, outcome.Usage, "extra"},
		{"missing explicit config", []string{"--config", filepath.Join(t.TempDir(), "nope.json"), "snapshot", "list"}, outcome.Usage, "nope.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := e.run(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, errOut, tc.want)
			}
		})
	}
}

func TestSnapshotCreateRefusedWhileLocked(t *testing.T) {
	e := newSnapEnv(t)
	unlock, err := state.Dir(e.stateDir).Lock("cutover --build x")
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := e.run(t, "--lock-wait", "0", "snapshot", "create")
	if code != outcome.Failed || !strings.Contains(errOut, "cutover --build x") || strings.Contains(errOut, "waiting up to") {
		t.Fatalf("create under a held lock: exit %d, stderr %q", code, errOut)
	}
	// Under --json the error names the lock and its holder: what the fleet
	// reads to retry a step later instead of failing the host.
	code, _, errOut = e.run(t, "--lock-wait", "100ms", "--json", "snapshot", "create")
	unlock()
	holder, locked := fleet.LockHeld(&fleet.StepResult{State: fleet.StepDone, ExitCode: code, Stderr: errOut})
	if code != outcome.Failed || !locked || holder != fmt.Sprintf("pid %d (cutover --build x)", os.Getpid()) {
		t.Fatalf("create --json under a held lock: exit %d, lock held %v by %q; stderr %q", code, locked, holder, errOut)
	}
	if list, _ := snapshot.List(e.stateDir); len(list) != 0 {
		t.Fatalf("a snapshot was created while locked: %+v", list)
	}
}

func TestSnapshotPruneProtectsPending(t *testing.T) {
	e := newSnapEnv(t)
	var ids []string
	for range 4 {
		ids = append(ids, e.create(t, "n"))
	}
	// Snapshot ids are unique but order within a second is by creation
	// time in the manifest; read the order back rather than assume it.
	list, err := snapshot.List(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	oldest := list[len(list)-1].ID
	nonce, _ := state.NewNonce()
	if err := state.Dir(e.stateDir).WritePending(&state.Pending{SnapshotID: oldest, Nonce: nonce, Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(t, "--json", "snapshot", "prune") // keepReleases = 2
	if code != outcome.OK {
		t.Fatalf("prune exit %d: %s", code, errOut)
	}
	var res snapshot.PruneResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// Protected: the pending cutover's and the newest of the current release.
	if res.Keep != 2 || len(res.Removed) != 1 || res.Removed[0] != list[2].ID || len(res.Protected) != 2 || res.Why[oldest] == "" || res.Why[list[0].ID] == "" {
		t.Fatalf("prune = %+v; list was %v", res, ids)
	}
	if _, err := snapshot.Load(e.stateDir, oldest); err != nil {
		t.Fatalf("the pending cutover's snapshot was pruned: %v", err)
	}

	// An unreadable marker: prune refuses rather than guess.
	snapWrite(t, filepath.Join(e.stateDir, state.PendingFile), "{", 0o644)
	code, _, errOut = e.run(t, "snapshot", "prune", "--all")
	if code != outcome.Failed || !strings.Contains(errOut, "refusing") {
		t.Fatalf("prune with a corrupt marker: exit %d, stderr %q", code, errOut)
	}
	if left, _ := snapshot.List(e.stateDir); len(left) != 3 {
		t.Fatalf("%d snapshots left, want 3", len(left))
	}
}

// TestSnapshotPruneGuards: --keep 0 is refused without --all (before, it
// removed every snapshot); --all and --keep N still keep the newest
// snapshot of the current release; --dry-run removes nothing.
func TestSnapshotPruneGuards(t *testing.T) {
	e := newSnapEnv(t)
	for range 3 {
		e.create(t, "n")
	}
	count := func() int {
		list, err := snapshot.List(e.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"keep 0", []string{"--keep", "0"}, "give --all"},
		{"all and keep", []string{"--all", "--keep", "2"}, "give one"},
		{"negative", []string{"--keep", "-1"}, "must be >= 1"},
	} {
		code, _, errOut := e.run(t, append([]string{"snapshot", "prune"}, tc.args...)...)
		if code != outcome.Usage || !strings.Contains(errOut, tc.want) || count() != 3 {
			t.Fatalf("%s: exit %d, %d left, stderr %q", tc.name, code, count(), errOut)
		}
	}
	code, out, errOut := e.run(t, "snapshot", "prune", "--all", "--dry-run")
	if code != 0 || count() != 3 || strings.Count(out, "would remove") != 2 || !strings.Contains(out, "current release v1") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("--all --dry-run: exit %d, %d left:\n%s%s", code, count(), out, errOut)
	}
	newest, _ := snapshot.List(e.stateDir)
	code, out, errOut = e.run(t, "snapshot", "prune", "--all", "--json")
	var res snapshot.PruneResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Removed) != 2 || count() != 1 {
		t.Fatalf("--all: exit %d, %d left: %s%s", code, count(), out, errOut)
	}
	if _, err := snapshot.Load(e.stateDir, newest[0].ID); err != nil {
		t.Fatalf("the current release's newest snapshot was pruned: %v", err)
	}
	// The help shows one default for --keep.
	_, out, _ = e.run(t, "snapshot", "prune", "--help")
	if strings.Count(out, "default:") != 1 || !strings.Contains(out, "(default: install.keepReleases)") {
		t.Fatalf("help defaults:\n%s", out)
	}
}

// TestSnapshotPruneKeepsTheNewest: --all keeps the newest snapshot even
// when it is not of the current release (production went back to v1 after
// a snapshot of v2): it is what `rollback --last` restores, and the
// cutover's own prune keeps it too (snapshot.Protect). Before, only the
// pending cutover's and the current release's newest were kept.
func TestSnapshotPruneKeepsTheNewest(t *testing.T) {
	e := newSnapEnv(t)
	e.create(t, "v1 a")
	ofV1 := e.create(t, "v1 b")
	if _, _, err := e.store.Install("v2", filepath.Join(filepath.Dir(e.cfgPath), "build")); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetCurrent("v2"); err != nil {
		t.Fatal(err)
	}
	ofV2 := e.create(t, "v2")
	if err := e.store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	list, err := snapshot.List(e.stateDir)
	if err != nil || len(list) != 3 || list[0].ID != ofV2 {
		t.Fatalf("list = %+v, %v; want 3, %s newest", list, err, ofV2)
	}
	code, out, errOut := e.run(t, "--json", "snapshot", "prune", "--all")
	var res snapshot.PruneResult
	if code != outcome.OK || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("prune --all: exit %d: %s%s", code, out, errOut)
	}
	if len(res.Removed) != 1 || len(res.Protected) != 2 || !strings.Contains(res.Why[ofV2], "rollback --last") || !strings.Contains(res.Why[ofV1], "current release v1") {
		t.Fatalf("prune --all = %+v", res)
	}
	for _, id := range []string{ofV1, ofV2} {
		if _, err := snapshot.Load(e.stateDir, id); err != nil {
			t.Errorf("protected snapshot %s was pruned: %v", id, err)
		}
	}
}

// TestRollbackNeedsATarget: a bare rollback prints its help and what --last
// would do, exits 2 and changes nothing (before, it rolled back); --dry-run
// lists the plan and the file changes and changes nothing.
func TestRollbackNeedsATarget(t *testing.T) {
	e := newSnapEnv(t)
	id := e.create(t, "before")
	// Production moves on: the config changed since the snapshot.
	snapWrite(t, e.configFile, "{\"listen\":\"127.0.0.1:4000\"}\n", 0o640)
	before, _ := os.ReadFile(e.configFile)
	code, out, errOut := e.run(t, "rollback")
	if code != outcome.Usage || !strings.Contains(out, "USAGE") || !strings.Contains(out, "would restore snapshot "+id) || !strings.Contains(errOut, "--snapshot ID or --last") {
		t.Fatalf("bare rollback: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = e.run(t, "rollback", "--last", "--dry-run")
	if code != 0 || !strings.Contains(out, "written   "+e.configFile) || !strings.Contains(out, "unchanged") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("--dry-run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = e.run(t, "rollback", "--snapshot", id, "--dry-run", "--json")
	var p deploy.RollbackPreview
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || !p.Act || p.SnapshotID != id || len(p.Changes) == 0 {
		t.Fatalf("--dry-run --json: exit %d %s", code, out)
	}
	if after, _ := os.ReadFile(e.configFile); string(after) != string(before) {
		t.Fatal("a dry run changed the config")
	}
	if code, _, errOut := e.run(t, "rollback", "--snapshot", id, "--last"); code != outcome.Usage || !strings.Contains(errOut, "give one") {
		t.Fatalf("two targets: exit %d %s", code, errOut)
	}
}
