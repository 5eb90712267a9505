package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Preview says what Restore of m would do to each path, touching nothing:
// the same decisions (a file already identical is unchanged, one the
// snapshot lacks is removed, current relinked) for --dry-run. Like Restore
// it verifies the snapshot first.
func Preview(m *Manifest) ([]Change, error) {
	if err := Verify(m); err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	var out []Change
	inManifest := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		inManifest[f.Path] = true
		st, err := os.Lstat(f.Path)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("preview %s: %s: %w", m.ID, f.Path, err)
		}
		action := ActionWritten
		switch {
		case !f.Exists && !exists:
			action = ActionUnchanged
		case !f.Exists:
			action = ActionRemoved
		case exists && upToDate(f, st, asRoot):
			action = ActionUnchanged
		}
		out = append(out, Change{Path: f.Path, Action: action})
	}
	for _, s := range m.Sets {
		extra, err := filepath.Glob(filepath.Join(s.Dir, s.Pattern))
		if err != nil {
			return out, fmt.Errorf("preview %s: %s: %w", m.ID, s.Dir, err)
		}
		for _, p := range extra {
			if !inManifest[p] {
				out = append(out, Change{Path: p, Action: ActionRemoved})
			}
		}
	}
	if l := m.Current; l.Path != "" {
		have, err := os.Readlink(l.Path)
		present := err == nil
		action := ActionRelinked
		switch {
		case !l.Exists && !present:
			action = ActionUnchanged
		case !l.Exists:
			action = ActionRemoved
		case present && have == l.Target:
			action = ActionUnchanged
		}
		out = append(out, Change{Path: l.Path, Action: action})
	}
	return out, nil
}
