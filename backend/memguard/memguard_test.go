package memguard

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeCgroup writes a directory shaped like a cgroup v2 mount with the
// process at /system.slice/x.service, and returns the options to read it.
func fakeCgroup(t testing.TB, files map[string]string) (Options, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "system.slice", "x.service")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		writeFile(t, filepath.Join(dir, name), body)
	}
	pc := filepath.Join(root, "proc-self-cgroup")
	writeFile(t, pc, "0::/system.slice/x.service\n")
	return Options{Root: root, ProcCgroup: pc}, dir
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const gib = 1 << 30

func stat(anon int64) string { return "anon " + fmtInt(anon) + "\nfile 123\n" }
func fmtInt(v int64) string  { return strconv.FormatInt(v, 10) }

func TestSampleAgainstFilesShapedLikeACgroup(t *testing.T) {
	tests := []struct {
		name      string
		high, max string
		anon      []int64 // successive samples
		want      []bool  // shedding after each
		limitFrom string
	}{
		{"below the high mark", "1073741824", "max", []int64{gib / 2}, []bool{false}, "memory.high"},
		{"at 85 % of memory.high sheds", "1073741824", "max", []int64{gib / 100 * 85}, []bool{true}, "memory.high"},
		{"memory.max when memory.high is max", "max", "1073741824", []int64{gib / 100 * 90}, []bool{true}, "memory.max"},
		{"hysteresis: sheds until below 75 %", "1073741824", "max",
			[]int64{gib / 100 * 90, gib / 100 * 80, gib / 100 * 76, gib / 100 * 70, gib / 100 * 80},
			[]bool{true, true, true, false, false}, "memory.high"},
		{"no limit never sheds", "max", "max", []int64{100 * gib}, []bool{false}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, dir := fakeCgroup(t, map[string]string{
				"memory.current": "1\n", "memory.stat": stat(0),
				"memory.high": tc.high + "\n", "memory.max": tc.max + "\n",
			})
			g, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range tc.anon {
				// memory.current holds page cache too; only anon decides.
				writeFile(t, filepath.Join(dir, "memory.current"), fmtInt(200*gib)+"\n")
				writeFile(t, filepath.Join(dir, "memory.stat"), stat(a))
				s := g.Sample()
				if s.Shedding != tc.want[i] || g.Shedding() != tc.want[i] {
					t.Fatalf("sample %d (anon %d of %+v): shedding %v, want %v", i, a, s, s.Shedding, tc.want[i])
				}
				if s.LimitFrom != tc.limitFrom || s.Anon != a {
					t.Fatalf("sample %d: %+v", i, s)
				}
			}
		})
	}
}

func TestUnreadableSampleKeepsState(t *testing.T) {
	o, dir := fakeCgroup(t, map[string]string{
		"memory.current": "1\n", "memory.stat": stat(gib), "memory.high": "1073741824\n", "memory.max": "max\n",
	})
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Shedding() {
		t.Fatal("want shedding at 100 %")
	}
	os.Remove(filepath.Join(dir, "memory.current"))
	if s := g.Sample(); !s.Shedding || s.Error == "" {
		t.Fatalf("after a failed read: %+v, want the previous state and the error", s)
	}
}

func TestNoCgroupV2(t *testing.T) {
	tests := []struct{ name, procCgroup string }{
		{"v1 only", "4:memory:/x\n1:cpu:/\n"},
		{"no memory.current", "0::/nowhere\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			pc := filepath.Join(root, "cg")
			writeFile(t, pc, tc.procCgroup)
			_, err := New(Options{Root: root, ProcCgroup: pc})
			if !errors.Is(err, ErrNoCgroup) {
				t.Fatalf("err = %v, want ErrNoCgroup", err)
			}
		})
	}
	var g *Guard
	if g.Shedding() || g.Last().Enabled {
		t.Fatal("a nil guard must never shed")
	}
}

// TestRealCgroupV2 reads the kernel's own files for this process.
func TestRealCgroupV2(t *testing.T) {
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil || !strings.Contains(string(b), "memory") {
		t.Skipf("this kernel offers no cgroup v2 memory controller at /sys/fs/cgroup (hybrid or v1 hierarchy: %v); the file-shaped tests cover the logic", err)
	}
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := g.Sample()
	if !s.Enabled || s.Current <= 0 || s.Anon <= 0 || s.Error != "" {
		t.Fatalf("sample of %s: %+v", g.Dir(), s)
	}
}

// serviceCgroup writes a slice holding two slots, each with its own
// limits, and returns a guard per slot, both measuring the service while
// shared says so.
func serviceCgroup(t testing.TB, slice map[string]string, shared *bool) (blue, green *Guard, sliceDir string) {
	t.Helper()
	root := t.TempDir()
	sliceDir = filepath.Join(root, "mcp-backend.slice")
	guards := make([]*Guard, 2)
	for i, slot := range []string{"mcp-backend@blue.service", "mcp-backend@green.service"} {
		dir := filepath.Join(sliceDir, slot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Each slot alone is far from its own limit.
		for name, body := range map[string]string{"memory.current": "1\n", "memory.stat": stat(gib / 10), "memory.high": "6442450944\n", "memory.max": "9663676416\n"} {
			writeFile(t, filepath.Join(dir, name), body)
		}
		pc := filepath.Join(root, "cgroup-"+slot)
		writeFile(t, pc, "0::/mcp-backend.slice/"+slot+"\n")
		g, err := New(Options{Root: root, ProcCgroup: pc})
		if err != nil {
			t.Fatal(err)
		}
		g.MeasureService(func() bool { return *shared })
		guards[i] = g
	}
	for name, body := range slice {
		writeFile(t, filepath.Join(sliceDir, name), body)
	}
	return guards[0], guards[1], sliceDir
}

func TestTwoSlotsRefuseTogetherAboveTheSlicesMark(t *testing.T) {
	tests := []struct {
		name      string
		shared    bool
		high, max string
		anon      []int64 // the slice's anon, successive samples
		want      []bool  // both slots shedding after each
		limitFrom string
	}{
		{"shared, slice below its high mark", true, "6442450944", "9663676416", []int64{3 * gib}, []bool{false}, "memory.high"},
		{"shared, slice at 85 % of memory.high: both shed", true, "6442450944", "9663676416", []int64{6 * gib / 100 * 86}, []bool{true}, "memory.high"},
		{"shared, slice's memory.max when its memory.high is max", true, "max", "9663676416", []int64{9 * gib / 100 * 90}, []bool{true}, "memory.max"},
		{"shared, hysteresis on the slice", true, "6442450944", "max",
			[]int64{6 * gib / 100 * 90, 6 * gib / 100 * 80, 6 * gib / 100 * 70},
			[]bool{true, true, false}, "memory.high"},
		// Alone, as before: the slot's own cgroup decides, far below its mark.
		{"alone, the slice is not read", false, "6442450944", "9663676416", []int64{6 * gib / 100 * 95}, []bool{false}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shared := tc.shared
			blue, green, sliceDir := serviceCgroup(t, map[string]string{
				"memory.current": "1\n", "memory.stat": stat(0), "memory.high": tc.high + "\n", "memory.max": tc.max + "\n",
			}, &shared)
			for i, anon := range tc.anon {
				writeFile(t, filepath.Join(sliceDir, "memory.stat"), stat(anon))
				for _, g := range []*Guard{blue, green} {
					s := g.Sample()
					if s.Shedding != tc.want[i] || g.Shedding() != tc.want[i] {
						t.Fatalf("sample %d (slice anon %d) of %s: shedding %v, want %v", i, anon, g.Dir(), s.Shedding, tc.want[i])
					}
					if !tc.shared {
						if s.Service != nil {
							t.Fatalf("alone: service reading %+v, want none", s.Service)
						}
						continue
					}
					if s.Service == nil || s.Service.Cgroup != sliceDir || s.Service.Anon != anon || s.Service.LimitFrom != tc.limitFrom {
						t.Fatalf("service reading %+v, want %s anon %d from %s", s.Service, sliceDir, anon, tc.limitFrom)
					}
				}
			}
		})
	}
}
