// Package snapshot holds rollback snapshots: self-contained copies of the
// desired state a rollback restores (the current release's files and the
// current link, the backend config, the backend unit, its socket unit and
// their drop-ins) under <stateDir>/snapshots/<id>/, each with a manifest of
// every file's sha256.
//
// A snapshot copies the release's files instead of referring to the release
// directory: pruning releases can then never break a rollback, and a restore
// re-creates a pruned or damaged release directory from the copy. The cost is
// one binary per kept snapshot, bounded by snapshot pruning.
//
// What mcpctl snapshot list, show and prune report is decided here too
// (ReadListing, Check, PruneKeeping); the command only renders it.
package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/ops/release"
)

// Layout inside the state directory and a snapshot.
const (
	SnapshotsDir = "snapshots"
	ManifestName = "manifest.json"
	filesDir     = "files"
)

var (
	// ErrCorrupt: the snapshot does not hold what its manifest says.
	ErrCorrupt = errors.New("snapshot is corrupt")
	// ErrNotFound: no snapshot with that id.
	ErrNotFound = errors.New("snapshot not found")
)

// File roles in a manifest, in restore order: the release first, so that
// current never points at a missing binary, and the link last.
const (
	RoleRelease = "release"
	RoleConfig  = "config"
	RoleUnit    = "unit"
	RoleDropIn  = "dropin"
)

// Manifest describes one snapshot. Paths are absolute original paths; Stored
// is relative to the snapshot directory.
type Manifest struct {
	ID          string    `json:"id"`
	Created     time.Time `json:"created"`
	Reason      string    `json:"reason"`
	Version     string    `json:"version"`          // the release current pointed to, "" if none
	Digest      string    `json:"digest,omitempty"` // "sha256:<hex>" of that release's binary
	InstallRoot string    `json:"installRoot"`
	Unit        string    `json:"unit"`
	Current     Link      `json:"current"`
	Files       []File    `json:"files"`
	// Sets are directories whose matching files are restored as a whole:
	// a drop-in added after the snapshot is removed by a restore.
	Sets []Set `json:"sets"`

	// Dir is the snapshot's directory (set by Create and Load).
	Dir string `json:"-"`
}

// Link is a symlink as it was.
type Link struct {
	Path   string `json:"path"`
	Target string `json:"target,omitempty"`
	Exists bool   `json:"exists"`
}

// File is one file as it was. A file that did not exist is recorded with
// Exists false, and a restore removes it.
type File struct {
	Role   string `json:"role"`
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	Stored string `json:"stored,omitempty"`
	Mode   Mode   `json:"mode,omitempty"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // hex
}

// Set is a directory whose files matching Pattern form one unit of state.
type Set struct {
	Dir     string `json:"dir"`
	Pattern string `json:"pattern"`
}

// Mode is a permission mode written as an octal string ("0644") in JSON.
type Mode fs.FileMode

func (m Mode) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%04o", uint32(m)))
}

func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v&^uint64(fs.ModePerm) != 0 {
		return fmt.Errorf("mode %q: want an octal permission like \"0644\"", s)
	}
	*m = Mode(v)
	return nil
}

var idRE = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$`)

const idTime = "20060102T150405Z"

// NewID returns an id that sorts by creation time (to the second) and is
// unique: 20261202T141500Z-a1b2c3.
func NewID(now time.Time) (string, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("snapshot id: %w", err)
	}
	return now.UTC().Format(idTime) + "-" + hex.EncodeToString(b[:]), nil
}

// ValidateID accepts ids of the NewID shape only, so an id can never name a
// path outside the snapshots directory.
func ValidateID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("snapshot id %q: want YYYYMMDDTHHMMSSZ-xxxxxx (see mcpctl snapshot list)", id)
	}
	return nil
}

func idTimeOf(id string) time.Time {
	t, _ := time.Parse(idTime, strings.SplitN(id, "-", 2)[0])
	return t
}

// Path is the snapshot directory of id.
func Path(stateDir, id string) string { return filepath.Join(stateDir, SnapshotsDir, id) }

// Load reads the manifest of snapshot id. A manifest that cannot be parsed
// or does not describe this snapshot is ErrCorrupt.
func Load(stateDir, id string) (*Manifest, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	dir := Path(stateDir, id)
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (no %s)", ErrNotFound, id, dir)
		}
		return nil, corrupt(id, "%s is missing", ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, corrupt(id, "%s: %v", ManifestName, err)
	}
	if m.ID != id {
		return nil, corrupt(id, "%s names snapshot %q", ManifestName, m.ID)
	}
	if err := m.check(); err != nil {
		return nil, corrupt(id, "%v", err)
	}
	m.Dir = dir
	return &m, nil
}

// check validates the manifest's own structure: the paths a restore will
// write must be absolute and clean, stored copies inside the snapshot.
func (m *Manifest) check() error {
	if m.Current.Path != "" && !isCleanAbs(m.Current.Path) {
		return fmt.Errorf("current.path %q: want a clean absolute path", m.Current.Path)
	}
	if m.Current.Exists && m.Current.Target == "" {
		return errors.New("current.target: empty for an existing link")
	}
	for i, f := range m.Files {
		if !isCleanAbs(f.Path) {
			return fmt.Errorf("files[%d].path %q: want a clean absolute path", i, f.Path)
		}
		if !f.Exists {
			continue
		}
		if f.Stored == "" || filepath.IsAbs(f.Stored) || filepath.Clean(f.Stored) != f.Stored ||
			!strings.HasPrefix(f.Stored, filesDir+"/") {
			return fmt.Errorf("files[%d].stored %q: want a clean path under %s/", i, f.Stored, filesDir)
		}
		if len(f.SHA256) != 64 {
			return fmt.Errorf("files[%d].sha256 %q: want 64 hex digits", i, f.SHA256)
		}
	}
	if m.Version != "" {
		bin := ""
		for _, f := range m.Files {
			if f.Role == RoleRelease && f.Exists && filepath.Base(f.Path) == release.BinaryName {
				bin = "sha256:" + f.SHA256
			}
		}
		if bin == "" || bin != m.Digest {
			return fmt.Errorf("digest %q: the manifest's %s file has %q", m.Digest, release.BinaryName, bin)
		}
	}
	for i, s := range m.Sets {
		if !isCleanAbs(s.Dir) {
			return fmt.Errorf("sets[%d].dir %q: want a clean absolute path", i, s.Dir)
		}
		if _, err := filepath.Match(s.Pattern, ""); err != nil || strings.Contains(s.Pattern, "/") {
			return fmt.Errorf("sets[%d].pattern %q: want a file name pattern", i, s.Pattern)
		}
	}
	return nil
}

func isCleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

func corrupt(id, format string, args ...any) error {
	return fmt.Errorf("%w: snapshot %s: %s; it cannot be restored safely: choose another snapshot (mcpctl snapshot list) or restore the files by hand",
		ErrCorrupt, id, fmt.Sprintf(format, args...))
}
