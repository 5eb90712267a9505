package release

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// writeBuild writes a fake build with the given content and returns its path.
func writeBuild(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// newStore returns a store whose clock advances one minute per install, so
// that "newest" is well defined without sleeping.
func newStore(t testing.TB) *Store {
	t.Helper()
	var n atomic.Int64
	base := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	return &Store{
		Root: filepath.Join(t.TempDir(), "opt"),
		Now:  func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Minute) },
	}
}

func TestValidateVersion(t *testing.T) {
	tests := []struct {
		v  string
		ok bool
	}{
		{"v1.2.3", true},
		{"1.0.0+build.7", true},
		{"2026-12-02_rc1", true},
		{"", false},
		{"a/b", false},
		{"..", false},
		{"v1..2", false},
		{".hidden", false},
		{"-flag", false},
		{"sp ace", false},
		{"ünï", false},
		{strings.Repeat("a", 129), false},
		{strings.Repeat("a", 128), true},
	}
	for _, tc := range tests {
		t.Run(tc.v, func(t *testing.T) {
			err := ValidateVersion(tc.v)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateVersion(%q) = %v, want ok=%v", tc.v, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "version") {
				t.Fatalf("error %q does not name the argument", err)
			}
		})
	}
}

func TestInstall(t *testing.T) {
	tests := []struct {
		name        string
		first       string // content installed first as v1; "" = nothing
		second      string // content then installed as v1
		wantCreated bool
		wantErr     error
	}{
		{"fresh", "", "binary-A", true, nil},
		{"identical again is idempotent", "binary-A", "binary-A", false, nil},
		{"different content refused", "binary-A", "binary-B", false, ErrConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			src := t.TempDir()
			if tc.first != "" {
				if _, _, err := s.Install("v1", writeBuild(t, src, "first", tc.first)); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := buildinfo.FileDigest(filepath.Join(s.Dir("v1"), BinaryName))
			build := writeBuild(t, src, "second", tc.second)
			rel, created, err := s.Install("v1", build)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr != nil) != (err != nil) {
				t.Fatalf("Install err = %v, want %v", err, tc.wantErr)
			}
			after, _ := buildinfo.FileDigest(filepath.Join(s.Dir("v1"), BinaryName))
			if err != nil {
				if before != after {
					t.Fatalf("refused install changed the release binary: %s -> %s", before, after)
				}
				return
			}
			if created != tc.wantCreated {
				t.Fatalf("created = %v, want %v", created, tc.wantCreated)
			}
			want, _ := buildinfo.FileDigest(build)
			if rel.Digest != want || after != want {
				t.Fatalf("digest: release.json %s, on disk %s, build %s", rel.Digest, after, want)
			}
			st, err := os.Stat(rel.Binary())
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o755 {
				t.Fatalf("binary mode %v, want 0755", st.Mode().Perm())
			}
			got, err := s.Get("v1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Digest != want || got.Source == "" || got.Installed.IsZero() {
				t.Fatalf("release.json = %+v", got)
			}
			if _, err := s.Current(); !errors.Is(err, ErrNoCurrent) {
				t.Fatalf("install touched current: %v", err)
			}
			ents, _ := os.ReadDir(filepath.Join(s.Root, ReleasesDir))
			if len(ents) != 1 {
				t.Fatalf("releases/ holds %d entries, want 1 (no temp dirs left)", len(ents))
			}
		})
	}
}

func TestInstallRejectsBadArguments(t *testing.T) {
	s := newStore(t)
	build := writeBuild(t, t.TempDir(), "b", "x")
	tests := []struct {
		name, version, build, wantInErr string
	}{
		{"slash", "a/b", build, "version"},
		{"dotdot", "..", build, "version"},
		{"missing build", "v1", filepath.Join(t.TempDir(), "nope"), "build"},
		{"directory build", "v1", t.TempDir(), "build"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Install(tc.version, tc.build)
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wantInErr)
			}
		})
	}
}

func TestCurrentAndSetCurrent(t *testing.T) {
	s := newStore(t)
	src := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if _, _, err := s.Install(v, writeBuild(t, src, v, "bin-"+v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCurrent("v3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetCurrent of a missing release = %v, want ErrNotFound", err)
	}
	for _, v := range []string{"v1", "v2", "v1"} {
		if err := s.SetCurrent(v); err != nil {
			t.Fatal(err)
		}
		got, err := s.Current()
		if err != nil || got != v {
			t.Fatalf("Current = %q, %v; want %q", got, err, v)
		}
		target, _ := os.Readlink(s.CurrentPath())
		if target != "releases/"+v {
			t.Fatalf("link target %q, want relative releases/%s", target, v)
		}
		b, err := os.ReadFile(filepath.Join(s.CurrentPath(), BinaryName))
		if err != nil || string(b) != "bin-"+v {
			t.Fatalf("current/%s = %q, %v", BinaryName, b, err)
		}
	}
}

// TestSetCurrentAtomic swaps current many times while readers resolve the
// link and its binary in a loop: neither may ever be missing.
func TestSetCurrentAtomic(t *testing.T) {
	s := newStore(t)
	src := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if _, _, err := s.Install(v, writeBuild(t, src, v, "bin-"+v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var misses, reads atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := s.Current(); err != nil {
					misses.Add(1)
				}
				if _, err := os.Stat(filepath.Join(s.CurrentPath(), BinaryName)); err != nil {
					misses.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 1000 {
		if err := s.SetCurrent([]string{"v2", "v1"}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if misses.Load() != 0 {
		t.Fatalf("current missing %d times in %d reads", misses.Load(), reads.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("readers never ran")
	}
}

func TestCurrentRejectsForeignTargets(t *testing.T) {
	tests := []struct {
		name, target string
		ok           bool
	}{
		{"relative", "releases/v1", true},
		{"absolute inside", "ROOT/releases/v1", true},
		{"outside", "/usr/bin", false},
		{"escape", "releases/../../etc", false},
		{"nested", "releases/v1/sub", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if err := os.MkdirAll(s.Root, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(strings.Replace(tc.target, "ROOT", s.Root, 1), s.CurrentPath()); err != nil {
				t.Fatal(err)
			}
			v, err := s.Current()
			if (err == nil) != tc.ok || (tc.ok && v != "v1") {
				t.Fatalf("Current = %q, %v; want ok=%v", v, err, tc.ok)
			}
		})
	}
}

func TestListRemovePrune(t *testing.T) {
	tests := []struct {
		name        string
		current     string
		keep        int
		protect     []string
		wantRemoved []string
	}{
		// Installed oldest to newest: v1 .. v5.
		{"keep newest two", "v5", 2, nil, []string{"v3", "v2", "v1"}},
		{"current is never pruned", "v1", 2, nil, []string{"v3", "v2"}},
		{"protected are never pruned", "v5", 1, []string{"v2", "v3"}, []string{"v4", "v1"}},
		{"keep zero keeps only current", "v4", 0, nil, []string{"v5", "v3", "v2", "v1"}},
		{"keep more than exist", "v5", 10, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			src := t.TempDir()
			for i := 1; i <= 5; i++ {
				v := "v" + string(rune('0'+i))
				if _, _, err := s.Install(v, writeBuild(t, src, v, "bin-"+v)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.SetCurrent(tc.current); err != nil {
				t.Fatal(err)
			}
			// A crashed install's leftover must go too.
			if err := os.Mkdir(filepath.Join(s.Root, ReleasesDir, ".tmp-v9-123"), 0o755); err != nil {
				t.Fatal(err)
			}
			list, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, r := range list {
				order = append(order, r.Version)
				if r.Current != (r.Version == tc.current) {
					t.Fatalf("%s: Current = %v", r.Version, r.Current)
				}
			}
			if !slices.Equal(order, []string{"v5", "v4", "v3", "v2", "v1"}) {
				t.Fatalf("List order %v, want newest first", order)
			}
			removed, err := s.Prune(tc.keep, tc.protect...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, tc.wantRemoved) {
				t.Fatalf("removed %v, want %v", removed, tc.wantRemoved)
			}
			ents, _ := os.ReadDir(filepath.Join(s.Root, ReleasesDir))
			if want := 5 - len(tc.wantRemoved); len(ents) != want {
				t.Fatalf("releases/ holds %d entries, want %d", len(ents), want)
			}
			if v, _ := s.Current(); v != tc.current {
				t.Fatalf("current moved to %q", v)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	s := newStore(t)
	src := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if _, _, err := s.Install(v, writeBuild(t, src, v, "bin-"+v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCurrent("v2"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		version string
		wantErr error
	}{
		{"current refused", "v2", ErrIsCurrent},
		{"other removed", "v1", nil},
		{"missing", "v1", ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Remove(tc.version)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Remove(%s) = %v, want %v", tc.version, err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(s.Dir("v2")); err != nil {
		t.Fatalf("current release gone: %v", err)
	}
	if _, err := os.Stat(s.Dir("v1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("v1 still there: %v", err)
	}
}
