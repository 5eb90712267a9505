package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/ops/release"
)

// Spec names what to snapshot and where to keep it.
type Spec struct {
	StateDir      string
	InstallRoot   string
	BackendConfig string // the backend's config file
	UnitDir       string // e.g. /etc/systemd/system
	Unit          string // e.g. mcp-backend.service; its drop-ins are <UnitDir>/<Unit>.d/*.conf
	// Socket, when set, is the socket unit that owns the service's port
	// (e.g. mcp-backend.socket), kept with its drop-ins like Unit: a
	// rollback restores the pair as it was, a missing socket file included.
	Socket string
	Reason string
	Now    func() time.Time // nil means time.Now
}

func (s *Spec) validate() error {
	for _, f := range []struct{ name, val string }{
		{"state dir", s.StateDir}, {"install root", s.InstallRoot},
		{"backend config", s.BackendConfig}, {"unit dir", s.UnitDir},
	} {
		if !filepath.IsAbs(f.val) {
			return fmt.Errorf("snapshot: %s %q: want an absolute path", f.name, f.val)
		}
	}
	if !unitName(s.Unit) {
		return fmt.Errorf("snapshot: unit %q: want a unit file name like mcp-backend.service", s.Unit)
	}
	if s.Socket != "" && !unitName(s.Socket) {
		return fmt.Errorf("snapshot: socket %q: want a unit file name like mcp-backend.socket", s.Socket)
	}
	return nil
}

func unitName(n string) bool {
	return n != "" && !strings.ContainsAny(n, "/\x00") && n != "." && n != ".."
}

// Create snapshots the current desired state. It is written into a temp
// directory inside snapshots/, synced, and renamed into place, so a snapshot
// either exists complete or not at all. The caller holds the mcpctl lock so
// nothing changes the files meanwhile.
func Create(ctx context.Context, spec Spec) (*Manifest, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	now := time.Now
	if spec.Now != nil {
		now = spec.Now
	}
	created := now().UTC()
	id, err := NewID(created)
	if err != nil {
		return nil, err
	}
	m := &Manifest{
		ID: id, Created: created, Reason: spec.Reason,
		InstallRoot: filepath.Clean(spec.InstallRoot), Unit: spec.Unit,
		Files: []File{}, Sets: []Set{},
	}

	// What to copy, in restore order.
	type item struct{ role, path string }
	var items []item
	store := &release.Store{Root: m.InstallRoot}
	m.Current.Path = store.CurrentPath()
	target, err := os.Readlink(m.Current.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Nothing installed yet: a restore removes current again.
	case err != nil:
		return nil, fmt.Errorf("snapshot: current: %w", err)
	default:
		m.Current.Exists, m.Current.Target = true, target
		if m.Version, err = release.VersionOf(m.InstallRoot, target); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		files, err := releaseFiles(store.Dir(m.Version))
		if err != nil {
			return nil, fmt.Errorf("snapshot: current release %s: %w", m.Version, err)
		}
		for _, p := range files {
			items = append(items, item{RoleRelease, p})
		}
	}
	items = append(items, item{RoleConfig, filepath.Clean(spec.BackendConfig)})
	unitDir := filepath.Clean(spec.UnitDir)
	for _, unit := range []string{spec.Socket, spec.Unit} {
		if unit == "" {
			continue
		}
		items = append(items, item{RoleUnit, filepath.Join(unitDir, unit)})
		dropDir := filepath.Join(unitDir, unit+".d")
		m.Sets = append(m.Sets, Set{Dir: dropDir, Pattern: "*.conf"})
		dropIns, err := filepath.Glob(filepath.Join(dropDir, "*.conf"))
		if err != nil {
			return nil, fmt.Errorf("snapshot: drop-ins: %w", err)
		}
		sort.Strings(dropIns)
		for _, p := range dropIns {
			items = append(items, item{RoleDropIn, p})
		}
	}

	snaps := filepath.Join(spec.StateDir, SnapshotsDir)
	if err := os.MkdirAll(snaps, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	tmp, err := os.MkdirTemp(snaps, ".tmp-"+id+"-")
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()

	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		f, err := copyIn(tmp, it.role, it.path)
		if err != nil {
			return nil, fmt.Errorf("snapshot: %s %s: %w", it.role, it.path, err)
		}
		m.Files = append(m.Files, f)
	}
	if m.Version != "" {
		// The digest the manifest advertises is what was copied; a
		// release.json that disagrees means the release is damaged, and a
		// snapshot of damage would restore damage.
		for _, f := range m.Files {
			if f.Role == RoleRelease && filepath.Base(f.Path) == release.BinaryName {
				m.Digest = "sha256:" + f.SHA256
			}
		}
		rel, err := store.Get(m.Version)
		if err != nil {
			return nil, fmt.Errorf("snapshot: current release: %w", err)
		}
		if m.Digest == "" || rel.Digest != m.Digest {
			return nil, fmt.Errorf("snapshot: current release %s: binary is %q but %s records %q: the release is damaged; reinstall it before snapshotting",
				m.Version, m.Digest, release.MetaName, rel.Digest)
		}
	}
	if err := atomicfs.WriteJSON(filepath.Join(tmp, ManifestName), m, 0o600); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if err := syncTree(tmp); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	dst := Path(spec.StateDir, id)
	if err := os.Rename(tmp, dst); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	ok = true
	if err := atomicfs.SyncDir(snaps); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	m.Dir = dst
	return m, nil
}

// releaseFiles lists the regular files of a release directory.
func releaseFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case d.Type().IsRegular():
			out = append(out, p)
			return nil
		default:
			return fmt.Errorf("%s: not a regular file (%v); release directories hold only files", p, d.Type())
		}
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no files", dir)
	}
	return out, nil
}

// copyIn copies the file at path into the snapshot at files/<path>, private
// to root (a config may hold secrets), and records what it was.
func copyIn(snapDir, role, path string) (File, error) {
	f := File{Role: role, Path: path}
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	if !st.Mode().IsRegular() {
		return f, fmt.Errorf("not a regular file (%v): snapshot and restore handle regular files only", st.Mode().Type())
	}
	f.Exists = true
	f.Stored = filesDir + path // path is absolute, so this is files/etc/...
	f.Mode = Mode(st.Mode().Perm())
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		f.UID, f.GID = int(sys.Uid), int(sys.Gid)
	}
	dst := filepath.Join(snapDir, f.Stored)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return f, err
	}
	digest, err := atomicfs.CopyFile(dst, path, 0o600, nil)
	if err != nil {
		return f, err
	}
	f.SHA256 = strings.TrimPrefix(digest, "sha256:")
	cst, err := os.Stat(dst)
	if err != nil {
		return f, err
	}
	f.Size = cst.Size()
	return f, nil
}

// syncTree fsyncs every directory under root, so that the entries created
// inside the temp snapshot are durable before it is renamed into place.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return atomicfs.SyncDir(p)
		}
		return nil
	})
}
