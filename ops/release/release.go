// Package release holds the installed builds of mcp-backend under an install
// root: immutable release directories <root>/releases/<version>/ and the
// <root>/current symlink that selects the one production runs.
package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// Names inside the install root and a release directory.
const (
	ReleasesDir = "releases"
	CurrentLink = "current"
	BinaryName  = "mcp-backend"
	MetaName    = "release.json"
)

var (
	// ErrNoCurrent: the current link does not exist (nothing installed yet).
	ErrNoCurrent = errors.New("no current release")
	// ErrNotFound: the named release is not installed.
	ErrNotFound = errors.New("release not found")
	// ErrConflict: a release of that version exists with a different binary.
	ErrConflict = errors.New("release exists with different content")
	// ErrIsCurrent: the operation would remove the release production runs.
	ErrIsCurrent = errors.New("release is the current one")
)

// Release is one installed build; release.json holds it.
type Release struct {
	Version   string    `json:"version"`
	Digest    string    `json:"digest"` // "sha256:<hex>" of the binary
	Installed time.Time `json:"installed"`
	Source    string    `json:"source"` // the build path it was installed from
	// Dir is the release directory; Current marks the one current points to
	// (List only).
	Dir     string `json:"-"`
	Current bool   `json:"-"`
}

// Binary is the path of the release's executable.
func (r *Release) Binary() string { return filepath.Join(r.Dir, BinaryName) }

var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// ValidateVersion accepts names that are safe as one path element.
func ValidateVersion(v string) error {
	if v == "" {
		return errors.New("version: must not be empty")
	}
	if !versionRE.MatchString(v) || strings.Contains(v, "..") {
		return fmt.Errorf("version %q: must be 1-128 characters of A-Z a-z 0-9 . _ + -, start with a letter or digit, and contain no \"..\" or \"/\"", v)
	}
	return nil
}

// Store is the install root. The zero Now means time.Now.
type Store struct {
	Root string
	Now  func() time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Store) releasesDir() string { return filepath.Join(s.Root, ReleasesDir) }

// Dir is the directory of release version.
func (s *Store) Dir(version string) string { return filepath.Join(s.releasesDir(), version) }

// CurrentPath is the path of the current symlink.
func (s *Store) CurrentPath() string { return filepath.Join(s.Root, CurrentLink) }

// LinkTarget is what current holds for version: relative, so the install root
// may be moved or bind-mounted elsewhere.
func LinkTarget(version string) string { return ReleasesDir + "/" + version }

// Install copies the build at buildPath into releases/<version>/ (0755), with
// release.json, through a temp directory renamed into place. Installing the
// same content again returns the existing release and created=false; a
// different binary under an existing version is ErrConflict. current is never
// touched.
func (s *Store) Install(version, buildPath string) (rel *Release, created bool, err error) {
	if err := ValidateVersion(version); err != nil {
		return nil, false, err
	}
	if s.Root == "" {
		return nil, false, errors.New("install root: must not be empty")
	}
	st, err := os.Stat(buildPath)
	if err != nil {
		return nil, false, fmt.Errorf("build: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, false, fmt.Errorf("build %s: not a regular file", buildPath)
	}
	src, err := filepath.Abs(buildPath)
	if err != nil {
		return nil, false, fmt.Errorf("build: %w", err)
	}
	want, err := buildinfo.FileDigest(src)
	if err != nil {
		return nil, false, fmt.Errorf("build: %w", err)
	}
	if existing, err := s.Get(version); err == nil {
		return s.sameOrConflict(existing, want)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}

	if err := os.MkdirAll(s.releasesDir(), 0o755); err != nil {
		return nil, false, fmt.Errorf("install: %w", err)
	}
	tmp, err := os.MkdirTemp(s.releasesDir(), ".tmp-"+version+"-")
	if err != nil {
		return nil, false, fmt.Errorf("install: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, false, fmt.Errorf("install: %w", err)
	}
	got, err := atomicfs.CopyFile(filepath.Join(tmp, BinaryName), src, 0o755, nil)
	if err != nil {
		return nil, false, fmt.Errorf("install %s: %w", version, err)
	}
	if got != want {
		return nil, false, fmt.Errorf("install %s: build %s changed while being copied (%s, then %s)", version, src, want, got)
	}
	rel = &Release{Version: version, Digest: got, Installed: s.now(), Source: src}
	if err := atomicfs.WriteJSON(filepath.Join(tmp, MetaName), rel, 0o644); err != nil {
		return nil, false, fmt.Errorf("install %s: %w", version, err)
	}
	dst := s.Dir(version)
	if err := os.Rename(tmp, dst); err != nil {
		// Someone installed the same version meanwhile: same rules apply.
		if existing, gerr := s.Get(version); gerr == nil {
			os.RemoveAll(tmp)
			return s.sameOrConflict(existing, want)
		}
		return nil, false, fmt.Errorf("install %s: %w", version, err)
	}
	if err := atomicfs.SyncDir(s.releasesDir()); err != nil {
		return nil, false, err
	}
	rel.Dir = dst
	return rel, true, nil
}

func (s *Store) sameOrConflict(existing *Release, want string) (*Release, bool, error) {
	// Hash the binary itself: release.json could be stale or edited.
	have, err := buildinfo.FileDigest(existing.Binary())
	if err != nil {
		return nil, false, fmt.Errorf("release %s: %w", existing.Version, err)
	}
	if have != want {
		return nil, false, fmt.Errorf("%w: release %s holds %s, the build is %s: install it under another --version", ErrConflict, existing.Version, have, want)
	}
	return existing, false, nil
}

// Get reads release version. A directory without a readable release.json is
// reported as an error, not as absent.
func (s *Store) Get(version string) (*Release, error) {
	if err := ValidateVersion(version); err != nil {
		return nil, err
	}
	dir := s.Dir(version)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (no %s)", ErrNotFound, version, dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, MetaName))
	if err != nil {
		return nil, fmt.Errorf("release %s: %w", version, err)
	}
	var r Release
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("release %s: %s: %w", version, MetaName, err)
	}
	if r.Version != version {
		return nil, fmt.Errorf("release %s: %s names version %q", version, MetaName, r.Version)
	}
	r.Dir = dir
	return &r, nil
}

// Current returns the version current points to, or ErrNoCurrent.
func (s *Store) Current() (string, error) {
	target, err := os.Readlink(s.CurrentPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s does not exist", ErrNoCurrent, s.CurrentPath())
	}
	if err != nil {
		return "", fmt.Errorf("current: %w", err)
	}
	return VersionOf(s.Root, target)
}

// VersionOf parses a current link target (relative, or absolute under root).
func VersionOf(root, target string) (string, error) {
	t := filepath.Clean(target)
	if filepath.IsAbs(t) {
		rel, err := filepath.Rel(filepath.Join(root, ReleasesDir), t)
		if err != nil || strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("current -> %q: not inside %s", target, filepath.Join(root, ReleasesDir))
		}
		t = filepath.Join(ReleasesDir, rel)
	}
	dir, v := filepath.Split(t)
	if filepath.Clean(dir) != ReleasesDir {
		return "", fmt.Errorf("current -> %q: want %s/<version>", target, ReleasesDir)
	}
	if err := ValidateVersion(v); err != nil {
		return "", fmt.Errorf("current -> %q: %w", target, err)
	}
	return v, nil
}

// SetCurrent points current at an installed release, atomically: the link
// exists at every instant, holding either the old or the new target.
func (s *Store) SetCurrent(version string) error {
	r, err := s.Get(version)
	if err != nil {
		return fmt.Errorf("set current: %w", err)
	}
	if st, err := os.Stat(r.Binary()); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("set current %s: %s is missing or not executable", version, r.Binary())
	}
	if err := atomicfs.Symlink(LinkTarget(version), s.CurrentPath()); err != nil {
		return fmt.Errorf("set current: %w", err)
	}
	return nil
}

// List returns the installed releases, newest install first. Entries whose
// release.json cannot be read are listed with what is known (the directory's
// time) so that they can still be seen and removed.
func (s *Store) List() ([]*Release, error) {
	ents, err := os.ReadDir(s.releasesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list releases: %w", err)
	}
	cur, _ := s.Current()
	var out []*Release
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || ValidateVersion(name) != nil {
			continue // temp dirs and strays
		}
		r, err := s.Get(name)
		if err != nil {
			r = &Release{Version: name, Dir: s.Dir(name)}
			if info, err := e.Info(); err == nil {
				r.Installed = info.ModTime().UTC()
			}
		}
		r.Current = name == cur
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Installed.Equal(out[j].Installed) {
			return out[i].Installed.After(out[j].Installed)
		}
		return out[i].Version > out[j].Version
	})
	return out, nil
}

// Remove deletes an installed release; the current one is refused.
func (s *Store) Remove(version string) error {
	if err := ValidateVersion(version); err != nil {
		return err
	}
	cur, err := s.Current()
	if err != nil && !errors.Is(err, ErrNoCurrent) {
		return fmt.Errorf("remove %s: %w", version, err)
	}
	if cur == version {
		return fmt.Errorf("remove %s: %w: point current elsewhere first", version, ErrIsCurrent)
	}
	dir := s.Dir(version)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove: %w: %s", ErrNotFound, version)
	}
	// Rename first so a half-deleted release never looks installed.
	gone := filepath.Join(s.releasesDir(), ".rm-"+version+"-"+fmt.Sprint(time.Now().UnixNano()))
	if err := os.Rename(dir, gone); err != nil {
		return fmt.Errorf("remove %s: %w", version, err)
	}
	if err := atomicfs.SyncDir(s.releasesDir()); err != nil {
		return err
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("remove %s: %w", version, err)
	}
	return nil
}

// Prune removes releases beyond the newest keep, never the current one nor
// the versions in protect (e.g. the release a pending cutover rolls back to),
// and leftovers of interrupted installs. It returns the removed versions.
func (s *Store) Prune(keep int, protect ...string) ([]string, error) {
	if keep < 0 {
		return nil, fmt.Errorf("prune: keep %d: must be >= 0", keep)
	}
	rels, err := s.List()
	if err != nil {
		return nil, err
	}
	protected := make(map[string]bool, len(protect))
	for _, p := range protect {
		protected[p] = true
	}
	var removed []string
	for i, r := range rels {
		if i < keep || r.Current || protected[r.Version] {
			continue
		}
		if err := s.Remove(r.Version); err != nil {
			return removed, err
		}
		removed = append(removed, r.Version)
	}
	s.removeLeftovers()
	return removed, nil
}

// removeLeftovers deletes temp directories of installs and removals that a
// crash interrupted. Callers hold the mcpctl lock, so none is in progress.
func (s *Store) removeLeftovers() {
	ents, _ := os.ReadDir(s.releasesDir())
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".tmp-") || strings.HasPrefix(n, ".rm-") {
			os.RemoveAll(filepath.Join(s.releasesDir(), n))
		}
	}
}
