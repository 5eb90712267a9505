package status_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoDBus keeps the observation free of a bus client: mcpctl
// passes the real one in through UnitReader.
func TestLinksNoDBus(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		// go-systemd's journal package writes datagrams to the journal's
		// socket (deploy events, through ops/state); it is no bus client.
		if strings.Contains(pkg, "godbus") || (strings.Contains(pkg, "go-systemd") && !strings.HasSuffix(pkg, "/go-systemd/v22/journal")) || strings.HasSuffix(pkg, "/systemd") {
			t.Errorf("ops/status links %s", pkg)
		}
	}
}
