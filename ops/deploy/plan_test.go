package deploy

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/systemd"
	"github.com/overdeck/mcp-backend/units"
)

func running(pid uint32, inv string) *systemd.UnitState {
	return &systemd.UnitState{LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: pid, InvocationID: inv}
}

var notFound = &systemd.UnitState{LoadState: "not-found", ActiveState: "inactive"}

func TestPlanInstall(t *testing.T) {
	clean := InstallFacts{Backend: notFound, BackendUnit: "mcp-backend.service", BackendPort: "127.0.0.1:3210", PortFree: true}
	tests := []struct {
		name        string
		edit        func(*InstallFacts)
		refusals    []string // substrings, one per expected refusal
		writeConfig bool
	}{
		{"clean host", func(*InstallFacts) {}, nil, true},
		{"config exists", func(f *InstallFacts) { f.ConfigExists = true }, nil, false},
		{"current exists", func(f *InstallFacts) { f.Current = "v1" }, []string{`current points to "v1"`}, true},
		{"backend active", func(f *InstallFacts) { f.Backend = running(10, "ab"); f.PortFree = false }, []string{"is active"}, true},
		{"backend loaded", func(f *InstallFacts) {
			f.Backend = &systemd.UnitState{LoadState: "loaded", ActiveState: "inactive", FragmentPath: "/etc/systemd/system/mcp-backend.service"}
		}, []string{"is loaded"}, true},
		{"port taken", func(f *InstallFacts) { f.PortFree = false }, []string{"127.0.0.1:3210 is taken"}, true},
		{"tunnels incomplete", func(f *InstallFacts) { f.TunnelsErr = errors.New("tunnels[0].url: empty") }, []string{"tunnels[0].url"}, true},
		{"current unreadable", func(f *InstallFacts) { f.CurrentErr = errors.New("not a symlink") }, []string{"not a symlink"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := clean
			tc.edit(&f)
			p := PlanInstall(f)
			if len(p.Refusals) != len(tc.refusals) {
				t.Fatalf("refusals %q, want %d", p.Refusals, len(tc.refusals))
			}
			for i, want := range tc.refusals {
				if !strings.Contains(p.Refusals[i], want) {
					t.Errorf("refusal %q lacks %q", p.Refusals[i], want)
				}
			}
			if p.OK() != (len(tc.refusals) == 0) || p.WriteConfig != tc.writeConfig {
				t.Errorf("plan %+v: OK=%v writeConfig=%v", p, p.OK(), p.WriteConfig)
			}
		})
	}
}

func TestPlanCanary(t *testing.T) {
	base := CanaryFacts{Production: running(42, "aa"), ProductionUnit: "mcp-backend.service", Canary: notFound,
		CanaryUnit: "mcp-backend-canary.service", CanaryListen: "127.0.0.1:3211", CanaryPortFree: true, Version: "v2", Digest: "sha256:b"}
	tests := []struct {
		name     string
		edit     func(*CanaryFacts)
		refusals []string
		stopOld  bool
	}{
		{"fresh", func(*CanaryFacts) {}, nil, false},
		{"port taken by another process", func(f *CanaryFacts) { f.CanaryPortFree = false }, []string{"127.0.0.1:3211 is taken by another process"}, false},
		{"previous canary holds the port", func(f *CanaryFacts) { f.Canary = running(7, "cc"); f.CanaryPortFree = false }, nil, true},
		{"production down", func(f *CanaryFacts) { f.Production = &systemd.UnitState{LoadState: "loaded", ActiveState: "failed"} }, []string{"is failed"}, false},
		{"production absent", func(f *CanaryFacts) { f.Production = notFound }, []string{"is inactive"}, false},
		{"same release", func(f *CanaryFacts) { f.Existing = &release.Release{Version: "v2", Digest: "sha256:b"} }, nil, false},
		{"version taken by another build", func(f *CanaryFacts) { f.Existing = &release.Release{Version: "v2", Digest: "sha256:a"} }, []string{"pick another --version"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			tc.edit(&f)
			p := PlanCanary(f)
			if len(p.Refusals) != len(tc.refusals) {
				t.Fatalf("refusals %q, want %d", p.Refusals, len(tc.refusals))
			}
			for i, want := range tc.refusals {
				if !strings.Contains(p.Refusals[i], want) {
					t.Errorf("refusal %q lacks %q", p.Refusals[i], want)
				}
			}
			if p.StopOld != tc.stopOld {
				t.Errorf("StopOld = %v, want %v", p.StopOld, tc.stopOld)
			}
		})
	}
}

func TestProductionProof(t *testing.T) {
	same := Identity{ActiveState: "active", MainPID: 42, InvocationID: "aa"}
	tests := []struct {
		name  string
		proof ProductionProof
		want  string // "" for a pass
	}{
		{"untouched", ProductionProof{Before: same, After: same, HealthzSamples: 20}, ""},
		{"restarted", ProductionProof{Before: same, After: Identity{ActiveState: "active", MainPID: 43, InvocationID: "bb"}, HealthzSamples: 20}, "MainPID 42 -> 43"},
		{"healthz failed", ProductionProof{Before: same, After: same, HealthzSamples: 20, HealthzFailures: 1, FirstFailure: "HTTP 500"}, "failed 1 of 20"},
		{"never sampled", ProductionProof{Before: same, After: same}, "never sampled"},
		{"unknown before", ProductionProof{HealthzSamples: 3}, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.proof.Problems(), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWithListen(t *testing.T) {
	in := []byte(`{"listen":"127.0.0.1:3210","futureKey":{"a":1},"concurrency":{"maxShell":4}}`)
	out, err := WithListen(in, "127.0.0.1:3211")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m["listen"] != "127.0.0.1:3211" || m["futureKey"] == nil || m["concurrency"].(map[string]any)["maxShell"] != 4.0 {
		t.Fatalf("WithListen = %s", out)
	}
	if _, err := WithListen([]byte(`[1]`), "x"); err == nil {
		t.Error("a JSON array: want an error")
	}
	var d map[string]any
	if err := json.Unmarshal(DefaultBackendConfig("127.0.0.1:9"), &d); err != nil || d["listen"] != "127.0.0.1:9" || len(d) != 1 {
		t.Fatalf("DefaultBackendConfig = %v (%v)", d, err)
	}
}

func TestWriteUnitsSkipsUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "units")
	us := []units.Unit{{Name: "a.service", Content: []byte("A\n")}, {Name: "b.service", Content: []byte("B\n")}}
	got, err := WriteUnits(dir, us)
	if err != nil || len(got) != 2 {
		t.Fatalf("first write: %v %v", got, err)
	}
	us[1].Content = []byte("B2\n")
	got, err = WriteUnits(dir, us)
	if err != nil || len(got) != 1 || got[0] != "b.service" {
		t.Fatalf("second write: %v %v, want only b.service", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "b.service")); string(b) != "B2\n" {
		t.Fatalf("b.service = %q", b)
	}
}

func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if PortFree(addr) {
		t.Fatalf("%s is held, PortFree says free", addr)
	}
	l.Close()
	if !PortFree(addr) {
		t.Fatalf("%s was released, PortFree says taken", addr)
	}
}
