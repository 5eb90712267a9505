package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

func running(pid uint32, inv string) *unitstate.State {
	return &unitstate.State{LoadState: "loaded", ActiveState: "active", SubState: "running", MainPID: pid, InvocationID: inv}
}

var notFound = &unitstate.State{LoadState: "not-found", ActiveState: "inactive"}

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
		{"current exists, production failed", func(f *InstallFacts) {
			f.Current, f.Backend = "v1", &unitstate.State{LoadState: "loaded", ActiveState: "failed"}
		}, []string{"use mcpctl recover, then mcpctl cutover", "is loaded"}, true},
		{"backend active", func(f *InstallFacts) { f.Backend = running(10, "ab"); f.PortFree = false }, []string{"is active"}, true},
		{"backend loaded", func(f *InstallFacts) {
			f.Backend = &unitstate.State{LoadState: "loaded", ActiveState: "inactive", FragmentPath: "/etc/systemd/system/mcp-backend.service"}
		}, []string{"is loaded"}, true},
		{"port taken", func(f *InstallFacts) { f.PortFree = false }, []string{"127.0.0.1:3210 is taken"}, true},
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

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		name    string
		printed string
		flag    string
		want    string // "" for accepted
	}{
		{"no --version: what the build prints", "v7", "", ""},
		{"--version equal to what the build prints", "v7", "v7", ""},
		{"--version naming it wrongly", "dev", "v7", "the build prints version dev; --version v7 would name it wrongly"},
		{"printed version unusable as a release name", "../x", "", `the build prints version "../x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkVersion(&candidate.Result{Version: tc.printed}, tc.flag)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if CodeOf(err) != CodeUsage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

func TestUndoerNewestFirstPastFailures(t *testing.T) {
	var order []string
	u := &undoer{}
	for _, name := range []string{"release", "current", "units"} {
		u.push(name, func(context.Context) error {
			order = append(order, name)
			if name == "current" {
				return errors.New("boom")
			}
			return nil
		})
	}
	steps := u.run(context.Background())
	if got := strings.Join(order, ","); got != "units,current,release" {
		t.Fatalf("undo order %s, want units,current,release", got)
	}
	if len(steps) != 3 || !steps[0].OK || steps[1].OK || steps[1].Err != "boom" || !steps[2].OK {
		t.Fatalf("steps %+v", steps)
	}
}

func TestReadAndRestoreUnits(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "old.service"), "OLD\n")
	us := []units.Unit{{Name: "old.service", Content: []byte("NEW\n")}, {Name: "new.service", Content: []byte("N\n")}}
	prev, err := readUnits(dir, us)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := units.Sync(dir, us); err != nil {
		t.Fatal(err)
	}
	reloads := 0
	if err := restoreUnits(context.Background(), reloadCounter{n: &reloads}, dir, prev); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "old.service")); string(b) != "OLD\n" {
		t.Errorf("old.service = %q after restore, want OLD", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("new.service after restore: %v, want removed", err)
	}
	if reloads != 1 {
		t.Errorf("%d daemon-reloads, want 1", reloads)
	}
}

// reloadCounter is a Systemd that only counts reloads (restoreUnits calls
// nothing else).
// reloadCounter counts reloads; any other call panics (through the nil
// embedded Systemd when not listed below).
type reloadCounter struct {
	Systemd
	n *int
}

func (r reloadCounter) DaemonReload(context.Context) error                   { *r.n++; return nil }
func (reloadCounter) Enable(context.Context, ...string) error                { panic("unexpected") }
func (reloadCounter) Disable(context.Context, ...string) error               { panic("unexpected") }
func (reloadCounter) Start(context.Context, string) error                    { panic("unexpected") }
func (reloadCounter) Stop(context.Context, string) error                     { panic("unexpected") }
func (reloadCounter) ResetFailed(context.Context, string) error              { panic("unexpected") }
func (reloadCounter) Unit(context.Context, string) (*unitstate.State, error) { panic("unexpected") }

func writeTestFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
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
		{"production down", func(f *CanaryFacts) { f.Production = &unitstate.State{LoadState: "loaded", ActiveState: "failed"} }, []string{"is failed"}, false},
		{"production absent", func(f *CanaryFacts) { f.Production = notFound }, []string{"is inactive"}, false},
		{"same release", func(f *CanaryFacts) { f.Existing = &release.Release{Version: "v2", Digest: "sha256:b"} }, nil, false},
		{"version taken by another build", func(f *CanaryFacts) { f.Existing = &release.Release{Version: "v2", Digest: "sha256:a"} }, []string{"a new build needs a new version stamp"}, false},
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
