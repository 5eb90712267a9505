// Package golden compares test output with files under a package's
// testdata/ directory and rewrites them when the test binary runs with
// -update. Golden files pin contracts (wire formats, unit files) that
// operators and scripts read, so a difference fails the test and names the
// file; -update is for when the change is intended.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Updating reports whether the test binary runs with -update.
func Updating() bool { return *update }

// Check compares got with testdata/<name>; with -update it writes got there
// instead (creating directories). A missing file is fatal; a difference is
// reported and the test goes on, so every differing file is listed.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (a contract changed; run go test with -update only if that is intended):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
