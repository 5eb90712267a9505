package stress

import (
	"cmp"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/systemd/unitstate/unitstatetest"
)

func TestUnitStateSampler(t *testing.T) {
	pid := uint32(os.Getpid())
	units := unitstatetest.Fixed{
		"up.service":      {LoadState: "loaded", ActiveState: "active", MainPID: pid, InvocationID: "inv", NRestarts: 3, MemoryHigh: 64 << 20},
		"stopped.service": {LoadState: "loaded", ActiveState: "inactive", MemoryHigh: ^uint64(0)},
		"gone.service":    {LoadState: "not-found", ActiveState: "inactive"},
		"unknown.service": nil,
	}
	tests := []struct {
		name, unit string
		wantHigh   uint64
		wantErr    string // of Sample
		wantPID    uint32
	}{
		{"running: its process's memory", "up.service", 64 << 20, "", pid},
		{"no main process, MemoryHigh infinite", "stopped.service", 0, "", 0},
		{"not loaded", "gone.service", 0, `LoadState "not-found"`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, high, err := OpenUnit(t.Context(), units, tc.unit)
			if err != nil || high != tc.wantHigh {
				t.Fatalf("OpenUnit: high %d, %v; want %d", high, err, tc.wantHigh)
			}
			got, err := s.Sample(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Sample: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.MainPID != tc.wantPID || got.At.IsZero() {
				t.Fatalf("Sample: %+v, %v", got, err)
			}
			if (got.MemoryBytes != 0) != (tc.wantPID != 0) {
				t.Fatalf("memory %d with main pid %d", got.MemoryBytes, tc.wantPID)
			}
			if tc.wantPID != 0 && (got.InvocationID != "inv" || got.NRestarts != 3) {
				t.Fatalf("Sample: %+v lacks the unit's state", got)
			}
		})
	}
	if _, _, err := OpenUnit(t.Context(), units, "unknown.service"); err == nil {
		t.Fatal("OpenUnit of an unreadable unit: no error")
	}
}

func TestUnitCgroupFiles(t *testing.T) {
	const unit = "mcp-backend-canary.service"
	tests := []struct {
		name, proc string
		unit       string // unit when empty, none for "no unit name"
		want       []string
	}{
		{"cgroup v2", "0::/system.slice/" + unit + "\n", "", []string{
			"/sys/fs/cgroup/system.slice/" + unit + "/memory.current",
			"/sys/fs/cgroup/unified/system.slice/" + unit + "/memory.current",
		}},
		{"hybrid host, memory delegated", "4:memory:/system.slice/" + unit + "\n0::/system.slice/" + unit + "\n", "", []string{
			"/sys/fs/cgroup/memory/system.slice/" + unit + "/memory.usage_in_bytes",
			"/sys/fs/cgroup/system.slice/" + unit + "/memory.current",
			"/sys/fs/cgroup/unified/system.slice/" + unit + "/memory.current",
		}},
		// The memory line names the container's root: its usage is not the
		// unit's (it held the host's page cache, 6 GiB, in a test run).
		{"container without a memory controller of its own", "4:memory:/\n1:cpu:/\n0::/system.slice/" + unit + "\n", "", []string{
			"/sys/fs/cgroup/system.slice/" + unit + "/memory.current",
			"/sys/fs/cgroup/unified/system.slice/" + unit + "/memory.current",
		}},
		{"another unit's cgroup", "4:memory:/system.slice/other.service\n0::/system.slice/other.service\n", "", nil},
		{"a unit whose name ends the same", "0::/system.slice/x-" + unit + "\n", "", nil},
		{"no unit name", "0::/system.slice/" + unit + "\n", "-", nil},
		{"garbage", "not a cgroup line", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := cmp.Or(tc.unit, unit)
			if u == "-" {
				u = ""
			}
			if got := unitCgroupFiles(tc.proc, u); !slices.Equal(got, tc.want) {
				t.Fatalf("unitCgroupFiles(%q, %q) =\n%q\nwant\n%q", tc.proc, u, got, tc.want)
			}
		})
	}
}

// TestCgroupMemory reads a real cgroup: this process's own memory
// cgroup, named as the unit, is read; any other name reads nothing.
func TestCgroupMemory(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup here")
	}
	own := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[1] == "memory" || f[0] == "0") && f[2] != "/" {
			own = path.Base(f[2])
		}
	}
	if own == "" {
		t.Skip("this process is in no memory cgroup of its own: " + strings.TrimSpace(string(b)))
	}
	pid := uint32(os.Getpid())
	if n := cgroupMemory(pid, own); n == 0 {
		t.Fatalf("no memory read for this process's cgroup %s:\n%s", own, b)
	}
	if n := cgroupMemory(pid, "not-this.service"); n != 0 {
		t.Fatalf("another unit's name: %d, want 0", n)
	}
	if n := cgroupMemory(0, own); n != 0 {
		t.Fatalf("pid 0: %d, want 0", n)
	}
}
