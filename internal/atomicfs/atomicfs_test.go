package atomicfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

func TestWriteFromModeDigestNoTemp(t *testing.T) {
	tests := []struct {
		name string
		data string
		perm os.FileMode
	}{
		{"executable", "#!/bin/sh\necho hi\n", 0o755},
		{"secret", "token", 0o600},
		{"empty", "", 0o644},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			if err := os.WriteFile(p, []byte("old content"), 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := WriteFrom(p, strings.NewReader(tc.data), tc.perm, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := buildinfo.FileDigest(p)
			if err != nil {
				t.Fatal(err)
			}
			if d != want {
				t.Fatalf("digest %s, file has %s", d, want)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.perm {
				t.Fatalf("mode %v, want %v", st.Mode().Perm(), tc.perm)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Fatalf("directory holds %d entries, want only the file (no temp left)", len(ents))
			}
		})
	}
}

func TestAppendLineRepairsTornTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(p, []byte(`{"a":1}`+"\n"+`{"torn":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AppendLine(p, []byte(`{"b":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || lines[2] != `{"b":2}` {
		t.Fatalf("lines = %q, want the new record alone on the third line", lines)
	}
	if err := AppendLine(p, []byte("a\nb"), 0o644); err == nil {
		t.Fatal("a record with a newline was accepted")
	}
}

// TestSymlinkNeverMissing swaps a link many times while readers resolve it in
// a loop: the name must exist at every instant.
func TestSymlinkNeverMissing(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "current")
	for _, v := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := Symlink("a", link); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var missing, reads atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := os.Readlink(link); err != nil {
					missing.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	for i := range 2000 {
		if err := Symlink([]string{"a", "b"}[i%2], link); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if missing.Load() != 0 {
		t.Fatalf("link missing in %d of %d reads", missing.Load(), reads.Load())
	}
	if reads.Load() == 0 {
		t.Fatal("readers never ran")
	}
	if got, _ := os.Readlink(link); got != "b" {
		t.Fatalf("link -> %q, want b", got)
	}
}

func TestReadLines(t *testing.T) {
	tests := []struct {
		name    string
		content *string // nil: no file
		want    []string
		wantErr bool
	}{
		{name: "no file"},
		{name: "blank lines skipped, numbers kept", content: ptr("a\n\n  \nb\n"), want: []string{"1:a", "4:b"}},
		{name: "torn tail still read", content: ptr("a\n{\"x\":"), want: []string{"1:a", "2:{\"x\":"}},
		{name: "line over the bound", content: ptr(strings.Repeat("x", 100) + "\n"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			err := ReadLines(path, 64, func(n int, line []byte) error {
				got = append(got, strconv.Itoa(n)+":"+string(line))
				return nil
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("lines = %q, want %q", got, tt.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
