package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
)

// pruneHost installs six releases v1..v6 and takes a snapshot of each, in
// that order, with install.keepReleases 2. It returns the config, the
// release store and each version's snapshot id.
func pruneHost(t testing.TB) (*ctlconfig.Config, *release.Store, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	cfg := ctlconfig.Default()
	cfg.Install.Root, cfg.StateDir, cfg.UnitDir = filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "units")
	cfg.Backend.Config = filepath.Join(dir, "config.json")
	cfg.Install.KeepReleases = 2
	for _, p := range []string{cfg.UnitDir, cfg.StateDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg.Backend.Config, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var tick int
	now := func() time.Time { tick++; return t0.Add(time.Duration(tick) * time.Minute) }
	store := &release.Store{Root: cfg.Install.Root, Now: now}
	snaps := map[string]string{} // version -> snapshot id
	for i := 1; i <= 6; i++ {
		v := fmt.Sprintf("v%d", i)
		build := filepath.Join(dir, "build-"+v)
		if err := os.WriteFile(build, []byte("#!/bin/sh\necho "+v+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Install(v, build); err != nil {
			t.Fatal(err)
		}
		if err := store.SetCurrent(v); err != nil {
			t.Fatal(err)
		}
		m, err := snapshot.Create(context.Background(), snapshot.Spec{StateDir: cfg.StateDir, InstallRoot: cfg.Install.Root,
			BackendConfig: cfg.Backend.Config, UnitDir: cfg.UnitDir, Unit: cfg.Backend.Unit, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		snaps[v] = m.ID
	}
	return cfg, store, snaps
}

// keptSnapshots lists the snapshot ids left in the state directory.
func keptSnapshots(t testing.TB, cfg *ctlconfig.Config) []string {
	t.Helper()
	list, err := snapshot.List(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	return ids
}

// TestPruneKeepsWhatRollbackNeeds prunes to two: the current release, the
// previous one and what a pending marker names survive even where they are
// old.
func TestPruneKeepsWhatRollbackNeeds(t *testing.T) {
	cfg, store, snaps := pruneHost(t)
	// A cutover v6 -> v5 just confirmed (current v5, previous v6, its
	// snapshot that of v6), while a marker names v1 and its snapshot.
	if err := store.SetCurrent("v5"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := state.Dir(cfg.StateDir).WritePending(&state.Pending{SnapshotID: snaps["v1"], Nonce: "0123456789abcdef0123456789abcdef",
		FromVersion: "v1", ToVersion: "v2", ArmedAt: t0, Deadline: t0.Add(time.Minute), TimerUnit: RollbackTimer, ServiceUnit: RollbackService}); err != nil {
		t.Fatal(err)
	}
	got := prune(&Env{Config: cfg}, store, []string{"v5", "v6"})
	if got == nil || got.Err != "" {
		t.Fatalf("prune = %+v", got)
	}
	rels, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, r := range rels {
		kept = append(kept, r.Version)
	}
	slices.Sort(kept)
	if want := []string{"v1", "v2", "v5", "v6"}; !slices.Equal(kept, want) {
		t.Errorf("releases kept %v, want %v (newest two, current, previous, the marker's)", kept, want)
	}
	ids := keptSnapshots(t, cfg)
	for _, v := range []string{"v6", "v5", "v1"} {
		if !slices.Contains(ids, snaps[v]) {
			t.Errorf("snapshot of %s pruned; kept %v", v, ids)
		}
	}
	if len(ids) != 3 {
		t.Errorf("kept %d snapshots %v, want 3", len(ids), ids)
	}
}

// TestPruneKeepsTheCurrentReleasesSnapshot: the cutover's prune follows
// snapshot.Protect, so the newest snapshot of the release now current
// survives even beyond install.keepReleases, as mcpctl snapshot prune
// keeps it (before, the cutover kept only its own snapshot and the
// marker's).
func TestPruneKeepsTheCurrentReleasesSnapshot(t *testing.T) {
	cfg, store, snaps := pruneHost(t)
	// A cutover v6 -> v3 (back to an older build) just confirmed: its own
	// snapshot is v6's, the newest; v3's is fourth.
	if err := store.SetCurrent("v3"); err != nil {
		t.Fatal(err)
	}
	got := prune(&Env{Config: cfg}, store, []string{"v3", "v6"})
	if got == nil || got.Err != "" {
		t.Fatalf("prune = %+v", got)
	}
	ids := keptSnapshots(t, cfg)
	slices.Sort(ids)
	want := []string{snaps["v3"], snaps["v5"], snaps["v6"]} // current's, newest two
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("kept snapshots %v, want %v (the current release v3's, the newest two)", ids, want)
	}
	if slices.Contains(got.Snapshots, snaps["v3"]) {
		t.Fatalf("pruned %v: the current release's snapshot among them", got.Snapshots)
	}
}
