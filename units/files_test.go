package units

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLineDiff(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\n"
	b := "a\nb\nC\nd\ne\nf\ng\nh\ni\n"
	got := Diff("old", "new", a, b)
	want := "--- old\n+++ new\n@@ -1,5 +1,5 @@\n a\n b\n-c\n+C\n d\n e\n@@ -7,2 +7,3 @@\n g\n h\n+i\n"
	if got != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", got, want)
	}
	created := Diff("old", "new", "", "x\ny\n")
	if created != "--- old\n+++ new\n@@ -0,0 +1,2 @@\n+x\n+y\n" {
		t.Fatalf("diff of a new file:\n%s", created)
	}
}

func TestWriteUnitsSkipsUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "units")
	us := []Unit{{Name: "a.service", Content: []byte("A\n")}, {Name: "b.service", Content: []byte("B\n")}}
	got, err := Sync(dir, us)
	if err != nil || len(got) != 2 {
		t.Fatalf("first write: %v %v", got, err)
	}
	us[1].Content = []byte("B2\n")
	got, err = Sync(dir, us)
	if err != nil || len(got) != 1 || got[0] != "b.service" {
		t.Fatalf("second write: %v %v, want only b.service", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "b.service")); string(b) != "B2\n" {
		t.Fatalf("b.service = %q", b)
	}
}
