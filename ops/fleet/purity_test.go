package fleet

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinksNoTransport keeps the planners and the executor free of the
// transport and of systemd: the caller passes a Remote in (sshrun's), and
// only the hosts' own mcpctl talks to their systemd.
func TestLinksNoTransport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "godbus") || strings.Contains(pkg, "go-systemd") || strings.HasSuffix(pkg, "/systemd") ||
			strings.HasSuffix(pkg, "/ops/fleet/sshrun") || strings.HasSuffix(pkg, "/ops/deploy") {
			t.Errorf("ops/fleet links %s", pkg)
		}
	}
	// No process is started here either: os/exec is the transport's.
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if imp.Path.Value == `"os/exec"` {
				t.Errorf("%s imports os/exec", f)
			}
		}
	}
}
