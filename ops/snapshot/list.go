package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// Info is one snapshot as listed: its manifest, or the error loading it (a
// broken snapshot is still listed, so that it can be seen and pruned).
type Info struct {
	ID       string
	Manifest *Manifest
	Err      error
}

// Time is when the snapshot was created (from its id when the manifest is
// unreadable).
func (i Info) Time() time.Time {
	if i.Manifest != nil {
		return i.Manifest.Created
	}
	return idTimeOf(i.ID)
}

// List returns the snapshots in stateDir, newest first.
func List(stateDir string) ([]Info, error) {
	ents, err := os.ReadDir(filepath.Join(stateDir, SnapshotsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []Info
	for _, e := range ents {
		if !e.IsDir() || ValidateID(e.Name()) != nil {
			continue // temp dirs and strays
		}
		m, err := Load(stateDir, e.Name())
		out = append(out, Info{ID: e.Name(), Manifest: m, Err: err})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		// The id's second first: it is always there and sorts like the
		// creation time; the manifest's nanoseconds break ties.
		if ta, tb := idTimeOf(a.ID), idTimeOf(b.ID); !ta.Equal(tb) {
			return ta.After(tb)
		}
		if ta, tb := a.Time(), b.Time(); !ta.Equal(tb) {
			return ta.After(tb)
		}
		return a.ID > b.ID
	})
	return out, nil
}

// PrunePlan is what Prune would remove: all but the newest keep snapshots,
// never one whose id is in protect. It changes nothing (--dry-run).
func PrunePlan(stateDir string, keep int, protect ...string) ([]string, error) {
	if keep < 0 {
		return nil, fmt.Errorf("prune snapshots: keep %d: must be >= 0", keep)
	}
	list, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	protected := make(map[string]bool, len(protect))
	for _, p := range protect {
		protected[p] = true
	}
	var out []string
	for i, s := range list {
		if i >= keep && !protected[s.ID] {
			out = append(out, s.ID)
		}
	}
	return out, nil
}

// Prune removes all but the newest keep snapshots, never one whose id is in
// protect (e.g. the snapshot a pending cutover rolls back to), and leftovers
// of interrupted creates. It returns the removed ids.
func Prune(stateDir string, keep int, protect ...string) ([]string, error) {
	plan, err := PrunePlan(stateDir, keep, protect...)
	if err != nil {
		return nil, err
	}
	snaps := filepath.Join(stateDir, SnapshotsDir)
	var removed []string
	for _, id := range plan {
		if err := removeDir(snaps, id); err != nil {
			return removed, fmt.Errorf("prune snapshot %s: %w", id, err)
		}
		removed = append(removed, id)
	}
	// Callers hold the mcpctl lock, so no create is in progress.
	ents, _ := os.ReadDir(snaps)
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".tmp-") || strings.HasPrefix(n, ".rm-") {
			os.RemoveAll(filepath.Join(snaps, n))
		}
	}
	return removed, nil
}

// removeDir renames first so a half-deleted snapshot never looks loadable.
func removeDir(parent, name string) error {
	gone := filepath.Join(parent, ".rm-"+name)
	if err := os.Rename(filepath.Join(parent, name), gone); err != nil {
		return err
	}
	if err := atomicfs.SyncDir(parent); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}
