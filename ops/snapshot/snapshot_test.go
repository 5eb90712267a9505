package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/release"
)

// host is a fake machine in a temp dir: install root, config, units, state.
type host struct {
	root, installRoot, config, unitDir, unit, stateDir string
	socket                                             string
	store                                              *release.Store
	clock                                              time.Time
}

func (h *host) unitPath() string  { return filepath.Join(h.unitDir, h.unit) }
func (h *host) dropInDir() string { return filepath.Join(h.unitDir, h.unit+".d") }
func (h *host) now() time.Time    { h.clock = h.clock.Add(time.Minute); return h.clock }
func (h *host) spec(reason string) Spec {
	return Spec{StateDir: h.stateDir, InstallRoot: h.installRoot, BackendConfig: h.config,
		UnitDir: h.unitDir, Unit: h.unit, Socket: h.socket, Reason: reason, Now: h.now}
}

func (h *host) socketPath() string { return filepath.Join(h.unitDir, h.socket) }

func write(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// installVersion installs a fake build as release v.
func (h *host) installVersion(t testing.TB, v string) {
	t.Helper()
	b := filepath.Join(h.root, "build-"+v)
	write(t, b, "#!/bin/sh\necho mcp-backend "+v+"\n", 0o755)
	if _, _, err := h.store.Install(v, b); err != nil {
		t.Fatal(err)
	}
}

// newHost builds production on v1 with a config, a unit and two drop-ins.
func newHost(t testing.TB) *host {
	t.Helper()
	root := t.TempDir()
	h := &host{
		root:        root,
		installRoot: filepath.Join(root, "opt/mcp-backend"),
		config:      filepath.Join(root, "etc/mcp-backend/config.json"),
		unitDir:     filepath.Join(root, "etc/systemd/system"),
		unit:        "mcp-backend.service",
		socket:      "mcp-backend.socket",
		stateDir:    filepath.Join(root, "var/lib/mcpctl"),
		clock:       time.Date(2026, 12, 2, 14, 15, 0, 0, time.UTC),
	}
	h.store = &release.Store{Root: h.installRoot, Now: h.now}
	h.installVersion(t, "v1")
	if err := h.store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	write(t, h.config, `{"listen":"127.0.0.1:3210"}`+"\n", 0o640)
	write(t, h.unitPath(), "[Service]\nExecStart=/opt/mcp-backend/current/mcp-backend serve\n", 0o644)
	write(t, h.socketPath(), "[Socket]\nListenStream=127.0.0.1:3210\n", 0o644)
	write(t, filepath.Join(h.dropInDir(), "10-guardrails.conf"), "[Service]\nTasksMax=512\n", 0o644)
	write(t, filepath.Join(h.dropInDir(), "20-env.conf"), "[Service]\nEnvironment=A=1\n", 0o644)
	return h
}

// fingerprint describes every path under the host except the state dir:
// type, mode, owner, content digest or link target. Equal fingerprints mean
// identical desired state.
func fingerprint(t testing.TB, h *host) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == h.stateDir {
			return filepath.SkipDir
		}
		if strings.HasPrefix(filepath.Base(p), "build-") {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v uid=%d gid=%d", st.Mode(), sys.Uid, sys.Gid)
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case st.Mode().IsRegular():
			dg, err := buildinfo.FileDigest(p)
			if err != nil {
				return err
			}
			desc += " " + dg
		case st.IsDir():
			return nil // directories may be left behind (e.g. an emptied drop-in dir)
		}
		out[strings.TrimPrefix(p, h.root)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func assertSame(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	if maps.Equal(want, got) {
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %q", what, k, v)
		}
	}
	t.FailNow()
}

// cutover mutates the host the way a deploy would: new release, new config,
// unit and drop-ins changed, added and removed.
func cutover(t testing.TB, h *host) {
	t.Helper()
	h.installVersion(t, "v2")
	if err := h.store.SetCurrent("v2"); err != nil {
		t.Fatal(err)
	}
	write(t, h.config, `{"listen":"127.0.0.1:3210","concurrency":{"maxActive":4}}`, 0o600)
	write(t, h.unitPath(), "[Service]\nExecStart=/bin/false\n", 0o644)
	write(t, h.socketPath(), "[Socket]\nListenStream=127.0.0.1:4000\nBacklog=1\n", 0o644)
	write(t, filepath.Join(h.unitDir, h.socket+".d", "10-new.conf"), "[Socket]\nBacklog=2\n", 0o644)
	write(t, filepath.Join(h.dropInDir(), "10-guardrails.conf"), "[Service]\nTasksMax=1\n", 0o644)
	write(t, filepath.Join(h.dropInDir(), "30-new.conf"), "[Service]\nNice=5\n", 0o644)
	if err := os.Remove(filepath.Join(h.dropInDir(), "20-env.conf")); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRestoreRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(testing.TB, *host)
	}{
		{"nothing changed", func(testing.TB, *host) {}},
		{"cutover to a new release", cutover},
		{"files deleted", func(t testing.TB, h *host) {
			for _, p := range []string{h.config, h.unitPath()} {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.RemoveAll(h.dropInDir()); err != nil {
				t.Fatal(err)
			}
		}},
		{"previous release pruned", func(t testing.TB, h *host) {
			cutover(t, h)
			if err := h.store.Remove("v1"); err != nil {
				t.Fatal(err)
			}
		}},
		{"release binary damaged in place", func(t testing.TB, h *host) {
			write(t, filepath.Join(h.store.Dir("v1"), release.BinaryName), "garbage", 0o755)
		}},
		{"modes and owners changed", func(t testing.TB, h *host) {
			if err := os.Chmod(h.config, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(h.unitPath(), 4321, 4321); err != nil {
				t.Fatal(err)
			}
		}},
		{"current replaced by a dangling link", func(t testing.TB, h *host) {
			if err := os.Remove(h.store.CurrentPath()); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("releases/nope", h.store.CurrentPath()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			if os.Geteuid() == 0 {
				// An owner that is not root, so that restoring it is visible.
				if err := os.Chown(h.config, 1234, 5678); err != nil {
					t.Fatal(err)
				}
			}
			before := fingerprint(t, h)
			m, err := Create(context.Background(), h.spec("test"))
			if err != nil {
				t.Fatal(err)
			}
			if m.Version != "v1" || !m.Current.Exists || m.Current.Target != "releases/v1" {
				t.Fatalf("manifest version %q current %+v", m.Version, m.Current)
			}
			rel, _ := h.store.Get("v1")
			if m.Digest != rel.Digest {
				t.Fatalf("manifest digest %s, release %s", m.Digest, rel.Digest)
			}
			assertSame(t, "snapshot changed the host", before, fingerprint(t, h))

			tc.mutate(t, h)

			loaded, err := Load(h.stateDir, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Restore(loaded)
			if err != nil {
				t.Fatal(err)
			}
			// Other installed releases are not desired state: the restore
			// leaves them for release pruning.
			after := fingerprint(t, h)
			maps.DeleteFunc(after, func(k, _ string) bool { return strings.Contains(k, "/releases/v2/") })
			assertSame(t, "after restore", before, after)
			if v, err := h.store.Current(); err != nil || v != "v1" {
				t.Fatalf("current = %q, %v", v, err)
			}
			again, err := Restore(loaded)
			if err != nil {
				t.Fatal(err)
			}
			if n := again.Changed(); n != 0 {
				t.Fatalf("second restore changed %d paths: %+v", n, again.Changes)
			}
			if tc.name == "nothing changed" && res.Changed() != 0 {
				t.Fatalf("restore over an unchanged host changed %+v", res.Changes)
			}
		})
	}
}

// TestRestoreMissingOriginals snapshots a host where nothing is installed:
// the restore must remove what was created since, current included.
func TestRestoreMissingOriginals(t *testing.T) {
	root := t.TempDir()
	h := &host{
		root: root, installRoot: filepath.Join(root, "opt"), config: filepath.Join(root, "etc/config.json"),
		unitDir: filepath.Join(root, "units"), unit: "mcp-backend.service", stateDir: filepath.Join(root, "state"),
		clock: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
	}
	h.store = &release.Store{Root: h.installRoot, Now: h.now}
	m, err := Create(context.Background(), h.spec("before install"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != "" || m.Current.Exists || len(m.Files) != 2 {
		t.Fatalf("manifest of an empty host: %+v", m)
	}
	for _, f := range m.Files {
		if f.Exists {
			t.Fatalf("%s recorded as existing", f.Path)
		}
	}
	h.installVersion(t, "v1")
	if err := h.store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	write(t, h.config, "{}", 0o644)
	write(t, h.unitPath(), "[Service]\n", 0o644)
	write(t, filepath.Join(h.dropInDir(), "10-x.conf"), "[Service]\n", 0o644)

	res, err := Restore(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{h.config, h.unitPath(), filepath.Join(h.dropInDir(), "10-x.conf"), h.store.CurrentPath()} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s survived the restore of a snapshot where it did not exist (%v)", p, err)
		}
	}
	if res.Changed() != 4 {
		t.Fatalf("changes %+v, want 4 removals", res.Changes)
	}
	// Releases are not part of the desired state unless current names them.
	if _, err := h.store.Get("v1"); err != nil {
		t.Fatalf("restore removed an installed release: %v", err)
	}
}

// TestRestoreRemovesSocketAddedLater: a snapshot taken before production
// had a socket unit removes the socket file and its drop-ins a later
// cutover added, so the restored service binds its port itself again.
func TestRestoreRemovesSocketAddedLater(t *testing.T) {
	h := newHost(t)
	if err := os.Remove(h.socketPath()); err != nil {
		t.Fatal(err)
	}
	before := fingerprint(t, h)
	m, err := Create(context.Background(), h.spec("before the socket"))
	if err != nil {
		t.Fatal(err)
	}
	recorded := false
	for _, f := range m.Files {
		if f.Path == h.socketPath() {
			recorded = !f.Exists
		}
	}
	if !recorded {
		t.Fatalf("manifest does not record %s as absent: %+v", h.socketPath(), m.Files)
	}
	cutover(t, h)
	if _, err := Restore(m); err != nil {
		t.Fatal(err)
	}
	after := fingerprint(t, h)
	maps.DeleteFunc(after, func(k, _ string) bool { return strings.Contains(k, "/releases/v2/") })
	assertSame(t, "after restore", before, after)
}

func TestCorruptSnapshotTouchesNothing(t *testing.T) {
	flip := func(t testing.TB, p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x01
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(m *Manifest, role, base string) string {
		for _, f := range m.Files {
			if f.Role == role && (base == "" || filepath.Base(f.Path) == base) {
				return filepath.Join(m.Dir, f.Stored)
			}
		}
		panic("no such file in manifest")
	}
	editManifest := func(t testing.TB, m *Manifest, edit func(*Manifest)) {
		c := *m
		c.Files = slices.Clone(m.Files)
		edit(&c)
		b, _ := json.Marshal(&c)
		if err := os.WriteFile(filepath.Join(m.Dir, ManifestName), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		corrupt  func(testing.TB, *Manifest)
		mentions string // the error names the bad file
		atLoad   bool   // detected when loading the manifest already
	}{
		{"flipped byte in binary", func(t testing.TB, m *Manifest) { flip(t, stored(m, RoleRelease, release.BinaryName)) }, release.BinaryName, false},
		{"flipped byte in config", func(t testing.TB, m *Manifest) { flip(t, stored(m, RoleConfig, "")) }, "config.json", false},
		{"flipped byte in last drop-in", func(t testing.TB, m *Manifest) { flip(t, stored(m, RoleDropIn, "20-env.conf")) }, "20-env.conf", false},
		{"unit copy missing", func(t testing.TB, m *Manifest) { os.Remove(stored(m, RoleUnit, "mcp-backend.service")) }, "mcp-backend.service", false},
		{"socket copy missing", func(t testing.TB, m *Manifest) { os.Remove(stored(m, RoleUnit, "mcp-backend.socket")) }, "mcp-backend.socket", false},
		{"drop-in truncated", func(t testing.TB, m *Manifest) { os.Truncate(stored(m, RoleDropIn, "10-guardrails.conf"), 0) }, "10-guardrails.conf", false},
		{"manifest sha256 edited", func(t testing.TB, m *Manifest) {
			editManifest(t, m, func(c *Manifest) { c.Files[len(c.Files)-1].SHA256 = strings.Repeat("0", 64) })
		}, "20-env.conf", false},
		{"manifest not JSON", func(t testing.TB, m *Manifest) {
			os.WriteFile(filepath.Join(m.Dir, ManifestName), []byte(`{"id":`), 0o600)
		}, ManifestName, true},
		{"manifest missing", func(t testing.TB, m *Manifest) { os.Remove(filepath.Join(m.Dir, ManifestName)) }, ManifestName, true},
		{"stored path escapes", func(t testing.TB, m *Manifest) {
			editManifest(t, m, func(c *Manifest) { c.Files[0].Stored = "files/../../../../etc/passwd" })
		}, "stored", true},
		{"restore path relative", func(t testing.TB, m *Manifest) {
			editManifest(t, m, func(c *Manifest) { c.Files[0].Path = "etc/x" })
		}, "path", true},
		{"digest disagrees with binary", func(t testing.TB, m *Manifest) {
			editManifest(t, m, func(c *Manifest) { c.Digest = "sha256:" + strings.Repeat("1", 64) })
		}, "digest", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			m, err := Create(context.Background(), h.spec("pre-cutover"))
			if err != nil {
				t.Fatal(err)
			}
			cutover(t, h)
			before := fingerprint(t, h)
			tc.corrupt(t, m)

			loaded, err := Load(h.stateDir, m.ID)
			if tc.atLoad {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.mentions) {
					t.Fatalf("Load = %v, want ErrCorrupt naming %q", err, tc.mentions)
				}
				loaded = m // a caller that kept the manifest must be refused too
				if tc.name == "manifest not JSON" || tc.name == "manifest missing" {
					return
				}
				editManifestInMemory(loaded, tc.name)
			} else if err != nil {
				t.Fatalf("Load: %v", err)
			}
			for _, op := range []struct {
				name string
				run  func() error
			}{
				{"Verify", func() error { return Verify(loaded) }},
				{"Restore", func() error { _, err := Restore(loaded); return err }},
			} {
				err := op.run()
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s = %v, want ErrCorrupt", op.name, err)
				}
				if !strings.Contains(err.Error(), tc.mentions) || !strings.Contains(err.Error(), "snapshot list") {
					t.Fatalf("%s error %q: want it to name %q and say what to do", op.name, err, tc.mentions)
				}
			}
			assertSame(t, "refused restore touched the host", before, fingerprint(t, h))
		})
	}
}

// editManifestInMemory applies the same structural corruption to a manifest
// already in memory, to prove Verify does not rely on Load having checked.
func editManifestInMemory(m *Manifest, name string) {
	switch name {
	case "stored path escapes":
		m.Files[0].Stored = "files/../../../../etc/passwd"
	case "restore path relative":
		m.Files[0].Path = "etc/x"
	case "digest disagrees with binary":
		m.Digest = "sha256:" + strings.Repeat("1", 64)
	}
}

func TestCreateIsAtomic(t *testing.T) {
	h := newHost(t)
	// A directory where the config should be: Create must fail and leave
	// neither a snapshot nor a temp dir behind.
	if err := os.Remove(h.config); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(h.config, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(context.Background(), h.spec("x")); err == nil || !strings.Contains(err.Error(), "config") {
		t.Fatalf("Create = %v, want an error naming the config", err)
	}
	ents, _ := os.ReadDir(filepath.Join(h.stateDir, SnapshotsDir))
	if len(ents) != 0 {
		t.Fatalf("failed create left %d entries", len(ents))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Create(ctx, h.spec("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context = %v", err)
	}
}

func TestCreateRefusesDamagedCurrentRelease(t *testing.T) {
	h := newHost(t)
	write(t, filepath.Join(h.store.Dir("v1"), release.BinaryName), "tampered", 0o755)
	_, err := Create(context.Background(), h.spec("x"))
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Create over a damaged release = %v", err)
	}
}

func TestCreateValidatesSpec(t *testing.T) {
	h := newHost(t)
	tests := []struct {
		name   string
		mutate func(*Spec)
		field  string
	}{
		{"relative state dir", func(s *Spec) { s.StateDir = "state" }, "state dir"},
		{"empty install root", func(s *Spec) { s.InstallRoot = "" }, "install root"},
		{"relative config", func(s *Spec) { s.BackendConfig = "c.json" }, "backend config"},
		{"unit with slash", func(s *Spec) { s.Unit = "../x.service" }, "unit"},
		{"empty unit", func(s *Spec) { s.Unit = "" }, "unit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := h.spec("x")
			tc.mutate(&s)
			_, err := Create(context.Background(), s)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Create = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

func TestLoadValidatesID(t *testing.T) {
	h := newHost(t)
	tests := []struct {
		id      string
		wantErr error
	}{
		{"../../etc", nil},
		{"", nil},
		{"20261202T141500Z", nil},
		{"20261202T141500Z-abcdeg", nil},
		{"20261202T141500Z-abcdef", ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			_, err := Load(h.stateDir, tc.id)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Load = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && !strings.Contains(err.Error(), "snapshot id") {
				t.Fatalf("error %q does not name the argument", err)
			}
		})
	}
}

func TestListAndPrune(t *testing.T) {
	tests := []struct {
		name    string
		keep    int
		protect []int // indexes into creation order (0 = oldest)
		want    []int // indexes removed, newest first
	}{
		{"keep three", 3, nil, []int{1, 0}},
		{"protected oldest survives", 2, []int{0}, []int{2, 1}},
		{"keep zero but protect one", 0, []int{3}, []int{4, 2, 1, 0}},
		{"keep all", 10, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			var ids []string
			for i := range 5 {
				m, err := Create(context.Background(), h.spec(fmt.Sprintf("n%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, m.ID)
			}
			// A crashed create's leftover is not a snapshot and goes on prune.
			if err := os.Mkdir(filepath.Join(h.stateDir, SnapshotsDir, ".tmp-leftover"), 0o700); err != nil {
				t.Fatal(err)
			}
			list, err := List(h.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, s := range list {
				if s.Err != nil {
					t.Fatal(s.Err)
				}
				order = append(order, s.ID)
			}
			if want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !slices.Equal(order, want) {
				t.Fatalf("List = %v, want newest first %v", order, want)
			}
			var protect, want []string
			for _, i := range tc.protect {
				protect = append(protect, ids[i])
			}
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			removed, err := Prune(h.stateDir, tc.keep, protect...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, want) {
				t.Fatalf("Prune removed %v, want %v", removed, want)
			}
			for _, id := range protect {
				if _, err := Load(h.stateDir, id); err != nil {
					t.Fatalf("protected %s: %v", id, err)
				}
			}
			ents, _ := os.ReadDir(filepath.Join(h.stateDir, SnapshotsDir))
			if len(ents) != 5-len(want) {
				t.Fatalf("snapshots/ holds %d entries, want %d", len(ents), 5-len(want))
			}
		})
	}
}

func TestListShowsBrokenSnapshots(t *testing.T) {
	h := newHost(t)
	m, err := Create(context.Background(), h.spec("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.Dir, ManifestName), []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := List(h.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != m.ID || !errors.Is(list[0].Err, ErrCorrupt) {
		t.Fatalf("List = %+v, want the broken snapshot with ErrCorrupt", list)
	}
	if removed, err := Prune(h.stateDir, 0); err != nil || len(removed) != 1 {
		t.Fatalf("Prune of a broken snapshot = %v, %v", removed, err)
	}
}

func TestManifestFormat(t *testing.T) {
	h := newHost(t)
	m, err := Create(context.Background(), h.spec("golden"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "created", "reason", "version", "digest", "current", "files", "sets"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("manifest lacks %q", k)
		}
	}
	f0 := raw["files"].([]any)[0].(map[string]any)
	for _, k := range []string{"path", "stored", "mode", "size", "sha256"} {
		if _, ok := f0[k]; !ok {
			t.Errorf("manifest file entry lacks %q", k)
		}
	}
	var cfg *File
	for i := range m.Files {
		if m.Files[i].Role == RoleConfig {
			cfg = &m.Files[i]
		}
	}
	if cfg == nil || cfg.Mode != 0o640 || !strings.Contains(string(b), `"mode": "0640"`) {
		t.Fatalf("config mode recorded as %v; manifest:\n%s", cfg, b)
	}
	st, _ := os.Stat(m.Dir)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("snapshot dir mode %v, want 0700 (configs may hold secrets)", st.Mode().Perm())
	}
	if len(m.Files) != 7 { // binary, release.json, config, socket, unit, two drop-ins
		t.Fatalf("manifest has %d files, want 7", len(m.Files))
	}
}
