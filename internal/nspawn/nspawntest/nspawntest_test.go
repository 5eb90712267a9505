package nspawntest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBootTwoAtOnceAndReboot boots two containers concurrently, checks that
// binds are shared both ways and survive a reboot, and that teardown leaves
// no cgroup behind.
func TestBootTwoAtOnceAndReboot(t *testing.T) {
	Require(t)
	var (
		mu      sync.Mutex
		cgroups []string
		dirs    []string
		names   = map[string]int{}
	)
	t.Run("group", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			t.Run("boot", func(t *testing.T) {
				t.Parallel()
				bind := t.TempDir()
				if err := os.WriteFile(filepath.Join(bind, "from-host"), []byte("hi"), 0o644); err != nil {
					t.Fatal(err)
				}
				m := Boot(t, Options{Binds: []string{bind}})
				mu.Lock()
				names[m.Name]++
				cgroups = append(cgroups, m.Cgroups()...)
				dirs = append(dirs, m.Dir)
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()

				out, err := m.Exec(ctx, "cat", filepath.Join(bind, "from-host"))
				if err != nil || out != "hi" {
					t.Fatalf("host file inside: %q, %v", out, err)
				}
				if _, err := m.Exec(ctx, "sh", "-c", "echo $$ > "+filepath.Join(bind, "from-container")); err != nil {
					t.Fatal(err)
				}
				hn, err := m.Exec(ctx, "cat", "/proc/sys/kernel/hostname")
				if err != nil || strings.TrimSpace(hn) != m.Name {
					t.Fatalf("hostname inside = %q, %v; want %s", hn, err, m.Name)
				}
				if _, err := os.Stat(filepath.Join(bind, "from-container")); err != nil {
					t.Fatalf("file written inside not on the host: %v", err)
				}
				// A unit written on the host is seen by the container's systemd.
				if err := os.WriteFile(filepath.Join(m.UnitsDir, "hello.service"), []byte("[Service]\nType=oneshot\nExecStart=/bin/true\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := m.Client.DaemonReload(ctx); err != nil {
					t.Fatal(err)
				}
				if err := m.Client.Start(ctx, "hello.service"); err != nil {
					t.Fatal(err)
				}
				firstLeader := m.Leader()

				m.Reboot(t)
				if m.Leader() == firstLeader || m.Leader() == 0 {
					t.Fatalf("leader after reboot = %d, before %d", m.Leader(), firstLeader)
				}
				for _, f := range []string{"from-host", "from-container"} {
					if _, err := m.Exec(ctx, "test", "-f", filepath.Join(bind, f)); err != nil {
						t.Fatalf("%s lost over the reboot: %v", f, err)
					}
				}
				st, err := m.Client.Unit(ctx, "hello.service")
				if err != nil || st.LoadState != "loaded" {
					t.Fatalf("unit after reboot: %+v, %v", st, err)
				}
			})
		}
	})
	// The parallel subtests and their cleanups have run.
	if len(names) != 2 {
		t.Fatalf("machine names %v: want two distinct", names)
	}
	if len(cgroups) == 0 {
		t.Fatal("containers booted without their own cgroups")
	}
	for _, p := range append(cgroups, dirs...) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
}

func TestBuildBinaryCaches(t *testing.T) {
	a := BuildBinary(t, "./internal/nspawn/nspawntest/testdata/hello", "v0.0.1")
	b := BuildBinary(t, "./internal/nspawn/nspawntest/testdata/hello", "v0.0.1")
	c := BuildBinary(t, "./internal/nspawn/nspawntest/testdata/hello", "v0.0.2")
	if a != b {
		t.Fatalf("same pkg and version built twice: %s, %s", a, b)
	}
	if a == c {
		t.Fatal("different versions share a binary")
	}
	out, err := exec.Command(c).Output()
	if err != nil || strings.TrimSpace(string(out)) != "v0.0.2" {
		t.Fatalf("%s printed %q, %v; want v0.0.2", c, out, err)
	}
}

// recordTB records how SkipOrFail ended a test without ending this one.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }
func (r *recordTB) Skipf(format string, args ...any)  { r.skip = fmt.Sprintf(format, args...) }

func TestSkipOrFailUnderCI(t *testing.T) {
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		r := &recordTB{TB: t}
		SkipOrFail(r, "no %s", "nspawn")
		switch {
		case ci == "true" && (r.fatal == "" || r.skip != "" || !strings.Contains(r.fatal, "no nspawn")):
			t.Errorf("CI=true: fatal %q skip %q, want a failure naming the reason", r.fatal, r.skip)
		case ci == "" && (r.skip == "" || r.fatal != "" || !strings.Contains(r.skip, "no nspawn")):
			t.Errorf("CI unset: fatal %q skip %q, want a skip naming the reason", r.fatal, r.skip)
		}
	}
}

// TestCommandCancelKillsInside: when a command's context ends, the process
// it runs inside the container ends too, not only nsenter.
func TestCommandCancelKillsInside(t *testing.T) {
	dir := t.TempDir()
	m := Boot(t, Options{Binds: []string{dir}})
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := m.Command(ctx, "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid string
	for end := time.Now().Add(10 * time.Second); pid == ""; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		if time.Now().After(end) {
			t.Fatal("the command never started inside")
		}
	}
	check, cancelCheck := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCheck()
	if _, err := m.Exec(check, "kill", "-0", pid); err != nil {
		t.Fatalf("pid %s not running inside before the cancel: %v", pid, err)
	}
	cancel()
	_ = cmd.Wait()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := m.Exec(check, "kill", "-0", pid); err != nil {
			break // gone
		}
		if time.Now().After(end) {
			t.Fatalf("pid %s (inside) still runs after its command's context ended", pid)
		}
	}
}

// TestRunExitCodes: Run returns a command's own exit code with its output,
// and an error (code -1) only when the command could not run to its exit.
func TestRunExitCodes(t *testing.T) {
	m := Boot(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		name           string
		argv           []string
		code           int
		stdout, stderr string
		wantErr        bool
	}{
		{name: "success", argv: []string{"sh", "-c", "echo out"}, code: 0, stdout: "out\n"},
		{name: "exit code and both streams", argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, code: 3, stdout: "out\n", stderr: "err\n"},
		{name: "no such command", argv: []string{"/nonexistent/command"}, code: 127},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut, err := m.Run(ctx, tc.argv...)
			if (err != nil) != tc.wantErr || code != tc.code || out != tc.stdout || (tc.stderr != "" && errOut != tc.stderr) {
				t.Fatalf("Run(%q) = %d, %q, %q, %v; want %d, %q, %q, error %v", tc.argv, code, out, errOut, err, tc.code, tc.stdout, tc.stderr, tc.wantErr)
			}
		})
	}
	t.Run("cut by its context", func(t *testing.T) {
		short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancelShort()
		code, _, _, err := m.Run(short, "sleep", "300")
		if err == nil || code != -1 {
			t.Fatalf("Run(sleep 300) cut by its context = %d, %v; want -1 and an error", code, err)
		}
	})
}
