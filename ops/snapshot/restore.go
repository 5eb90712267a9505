package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
)

// Restore actions.
const (
	ActionWritten   = "written"
	ActionRemoved   = "removed"
	ActionRelinked  = "relinked"
	ActionUnchanged = "unchanged"
)

// Change is what a restore did to one path (or found already right).
type Change = outcome.Change

// Result is the outcome of a restore.
type Result struct {
	ID      string   `json:"id"`
	Changes []Change `json:"changes"`
}

// Changed counts the paths the restore actually modified; zero means the
// desired state was already in place (a repeated restore is a no-op).
func (r *Result) Changed() int {
	n := 0
	for _, c := range r.Changes {
		if c.Action != ActionUnchanged {
			n++
		}
	}
	return n
}

// Verify re-hashes every stored file against the manifest. Any difference
// or missing file is ErrCorrupt naming each file and what to do.
func Verify(m *Manifest) error {
	if m == nil || m.Dir == "" {
		return errors.New("verify: manifest not loaded (use Load or Create)")
	}
	if err := m.check(); err != nil {
		return corrupt(m.ID, "%v", err)
	}
	var problems []string
	for _, f := range m.Files {
		if !f.Exists {
			continue
		}
		stored := filepath.Join(m.Dir, f.Stored)
		st, err := os.Lstat(stored)
		if err != nil || !st.Mode().IsRegular() {
			problems = append(problems, fmt.Sprintf("%s (copy of %s) is missing or not a regular file", f.Stored, f.Path))
			continue
		}
		d, err := buildinfo.FileDigest(stored)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (copy of %s): %v", f.Stored, f.Path, err))
			continue
		}
		if d != "sha256:"+f.SHA256 || st.Size() != f.Size {
			problems = append(problems, fmt.Sprintf("%s (copy of %s) has %s, %d bytes; the manifest says sha256:%s, %d bytes",
				f.Stored, f.Path, d, st.Size(), f.SHA256, f.Size))
		}
	}
	if len(problems) > 0 {
		return corrupt(m.ID, "%s", strings.Join(problems, "; "))
	}
	return nil
}

// Restore puts the snapshot's desired state back: every file written
// atomically (temp + rename) with its mode and owner, files that did not
// exist removed, drop-ins added since removed, and current swapped back
// atomically last. It verifies the whole snapshot FIRST and touches nothing
// if any file is corrupt. Files already identical are left alone, so a
// second restore changes nothing. A failure part-way leaves each file either
// old or new, and running Restore again completes it.
func Restore(m *Manifest) (*Result, error) {
	if err := Verify(m); err != nil {
		return nil, err
	}
	res := &Result{ID: m.ID}
	// Only root may give files away; others restore with their own ids.
	asRoot := os.Geteuid() == 0
	inManifest := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		inManifest[f.Path] = true
		action, err := restoreFile(m, f, asRoot)
		if err != nil {
			return res, fmt.Errorf("restore %s: %s: %w", m.ID, f.Path, err)
		}
		res.Changes = append(res.Changes, Change{Path: f.Path, Action: action})
	}
	for _, s := range m.Sets {
		extra, err := filepath.Glob(filepath.Join(s.Dir, s.Pattern))
		if err != nil {
			return res, fmt.Errorf("restore %s: %s: %w", m.ID, s.Dir, err)
		}
		for _, p := range extra {
			if inManifest[p] {
				continue
			}
			if st, err := os.Lstat(p); err == nil && st.IsDir() {
				return res, fmt.Errorf("restore %s: %s is a directory where the snapshot has no file; remove it by hand", m.ID, p)
			}
			if err := atomicfs.Remove(p); err != nil {
				return res, fmt.Errorf("restore %s: %w", m.ID, err)
			}
			res.Changes = append(res.Changes, Change{Path: p, Action: ActionRemoved})
		}
	}
	action, err := restoreLink(m)
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", m.ID, err)
	}
	if action != "" {
		res.Changes = append(res.Changes, Change{Path: m.Current.Path, Action: action})
	}
	return res, nil
}

func restoreFile(m *Manifest, f File, asRoot bool) (string, error) {
	st, err := os.Lstat(f.Path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if exists && st.IsDir() {
		return "", errors.New("is a directory where the snapshot has a file; remove it by hand")
	}
	if !f.Exists {
		if !exists {
			return ActionUnchanged, nil
		}
		if err := atomicfs.Remove(f.Path); err != nil {
			return "", err
		}
		return ActionRemoved, nil
	}
	if exists && upToDate(f, st, asRoot) {
		return ActionUnchanged, nil
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(filepath.Join(m.Dir, f.Stored))
	if err != nil {
		return "", err
	}
	defer src.Close()
	var owner *atomicfs.Owner
	if asRoot {
		owner = &atomicfs.Owner{UID: f.UID, GID: f.GID}
	}
	// The copy is checked again while streaming: if it changed since
	// Verify, the temp file is dropped and the original stays in place.
	r := &verifyingReader{r: src, h: sha256.New(), want: f.SHA256, wantN: f.Size, name: f.Stored}
	if _, err := atomicfs.WriteFrom(f.Path, r, fs.FileMode(f.Mode), owner); err != nil {
		return "", err
	}
	return ActionWritten, nil
}

func upToDate(f File, st fs.FileInfo, asRoot bool) bool {
	if !st.Mode().IsRegular() || st.Size() != f.Size || st.Mode().Perm() != fs.FileMode(f.Mode) {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); asRoot && ok && (int(sys.Uid) != f.UID || int(sys.Gid) != f.GID) {
		return false
	}
	d, err := buildinfo.FileDigest(f.Path)
	return err == nil && d == "sha256:"+f.SHA256
}

func restoreLink(m *Manifest) (string, error) {
	l := m.Current
	if l.Path == "" {
		return "", nil
	}
	have, err := os.Readlink(l.Path)
	present := err == nil
	if err != nil {
		if _, lerr := os.Lstat(l.Path); lerr == nil {
			return "", fmt.Errorf("%s exists and is not a symlink; move it away by hand", l.Path)
		}
	}
	if !l.Exists {
		if !present {
			return ActionUnchanged, nil
		}
		if err := atomicfs.Remove(l.Path); err != nil {
			return "", err
		}
		return ActionRemoved, nil
	}
	if present && have == l.Target {
		return ActionUnchanged, nil
	}
	// Never point production at a release that is not there.
	dir := l.Target
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(l.Path), dir)
	}
	if _, err := os.Stat(filepath.Join(dir, release.BinaryName)); err != nil {
		return "", fmt.Errorf("current -> %s: %w; refusing to point current at a missing release", l.Target, err)
	}
	if err := atomicfs.Symlink(l.Target, l.Path); err != nil {
		return "", err
	}
	return ActionRelinked, nil
}

type verifyingReader struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	want  string
	wantN int64
	name  string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want || v.n != v.wantN {
			return n, fmt.Errorf("%w: %s changed during the restore (sha256:%s, %d bytes)", ErrCorrupt, v.name, got, v.n)
		}
	}
	return n, err
}
