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

// TestPruneKeepsWhatRollbackNeeds installs six releases and takes a snapshot
// of each, then prunes to two: the current release, the previous one and
// what a pending marker names survive even where they are old.
func TestPruneKeepsWhatRollbackNeeds(t *testing.T) {
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
	// A cutover v6 -> v5 just confirmed (current v5, previous v6, its
	// snapshot that of v6), while a marker names v1 and its snapshot.
	if err := store.SetCurrent("v5"); err != nil {
		t.Fatal(err)
	}
	if err := state.Dir(cfg.StateDir).WritePending(&state.Pending{SnapshotID: snaps["v1"], Nonce: "0123456789abcdef0123456789abcdef",
		FromVersion: "v1", ToVersion: "v2", ArmedAt: t0, Deadline: t0.Add(time.Minute), TimerUnit: RollbackTimer, ServiceUnit: RollbackService}); err != nil {
		t.Fatal(err)
	}
	got := prune(&Env{Config: cfg}, store, []string{snaps["v6"]}, []string{"v5", "v6"})
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
	list, err := snapshot.List(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	for _, v := range []string{"v6", "v5", "v1"} {
		if !slices.Contains(ids, snaps[v]) {
			t.Errorf("snapshot of %s pruned; kept %v", v, ids)
		}
	}
	if len(ids) != 3 {
		t.Errorf("kept %d snapshots %v, want 3", len(ids), ids)
	}
}
