package archdoc

import (
	"os/exec"
	"strings"
	"testing"
)

// module prefixes the packages the table names.
const module = "github.com/overdeck/mcp-backend/"

// busClient is D-Bus, as mcpctl's planners and executors must never link
// it: the caller passes the one systemd client in through an interface.
// go-systemd's journal package only writes datagrams to the journal's
// socket (deploy events, through ops/state); it is no bus client.
func busClient(dep string) bool {
	return strings.Contains(dep, "godbus") ||
		(strings.Contains(dep, "go-systemd") && !strings.HasSuffix(dep, "/go-systemd/v22/journal")) ||
		strings.HasSuffix(dep, "/mcp-backend/systemd")
}

// TestLayers keeps the layers ARCHITECTURE.md draws: what each package
// must not link, directly or through another, and what it must not import
// itself.
func TestLayers(t *testing.T) {
	tests := []struct {
		pkg string
		// mustNotLink is asked of every package in `go list -deps`.
		mustNotLink func(dep string) bool
		why         string
		// notImported are packages pkg itself must not import.
		notImported []string
	}{
		{pkg: "ops/deploy", mustNotLink: busClient, why: "the planners and executors get Systemd passed in"},
		{pkg: "ops/status", mustNotLink: busClient, why: "mcpctl passes the real client in through UnitReader"},
		{pkg: "stress", mustNotLink: busClient, why: "mcpctl passes the unit sampler in"},
		{
			pkg: "ops/fleet",
			mustNotLink: func(dep string) bool {
				return strings.Contains(dep, "godbus") || strings.Contains(dep, "go-systemd") ||
					strings.HasSuffix(dep, "/mcp-backend/systemd") ||
					strings.HasSuffix(dep, "/ops/fleet/sshrun") || strings.HasSuffix(dep, "/ops/deploy")
			},
			why: "the caller passes a Remote in (sshrun's); only the hosts' own mcpctl talks to their systemd",
			// No process is started there either: os/exec is the transport's.
			notImported: []string{"os/exec"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", module+tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps: %v", err)
			}
			for _, dep := range strings.Fields(string(out)) {
				if tc.mustNotLink(dep) {
					t.Errorf("%s links %s: %s", tc.pkg, dep, tc.why)
				}
			}
			out, err = exec.Command("go", "list", "-f", "{{range .Imports}}{{.}} {{end}}", module+tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			for _, imp := range strings.Fields(string(out)) {
				for _, no := range tc.notImported {
					if imp == no {
						t.Errorf("%s imports %s", tc.pkg, imp)
					}
				}
			}
		})
	}
}
