// Package nspawntest boots a disposable, real systemd for tests: the host's
// own OS under systemd-nspawn --volatile=yes (a tmpfs root over the host's
// read-only /usr), with only the test's own directories bound in. A test gets
// a connected systemd client, a way to run commands inside (nsenter, as an
// operator would), and a teardown that leaves nothing behind.
//
// It is a normal package, not a _test file, so tests of every package can
// use it. It needs root and systemd-nspawn; without them tests skip, except
// under CI=true, where they fail.
package nspawntest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/systemd"
)

// Options configure Boot.
type Options struct {
	// Binds are host directories bound read-write at the same path inside,
	// so paths in units and configs mean the same on both sides. They must be
	// the test's own directories, never a live host directory such as /tmp.
	Binds []string
	// BootTimeout bounds the wait for SystemState running/degraded; 60s when
	// zero.
	BootTimeout time.Duration
	// TTL kills the container even if the test process dies without
	// cleaning up; 15 minutes when zero.
	TTL time.Duration
}

// Machine is one booted container.
type Machine struct {
	// Name is the machine name, unique per Boot.
	Name string
	// Dir holds the container's host-side files: units/, dbus/, machine-id,
	// console.log.
	Dir string
	// UnitsDir is bound at /etc/systemd/system inside.
	UnitsDir string
	// BusAddress is the container's system bus, reachable from the host.
	BusAddress string
	// Client is connected to the container's systemd through BusAddress.
	Client *systemd.Client

	t       testing.TB
	opts    Options
	cgroups []string
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	leader  int
}

// requireEnv skips (or, under CI=true, fails) when this machine cannot run
// a container.
func requireEnv(t testing.TB) {
	t.Helper()
	if reason := unavailable(os.Geteuid(), exec.LookPath); reason != "" {
		SkipOrFail(t, "%s", reason)
	}
}

// unavailable says why a container cannot run here, or "".
func unavailable(euid int, lookPath func(string) (string, error)) string {
	if euid != 0 {
		return "needs root to run systemd-nspawn"
	}
	for _, tool := range []string{"systemd-nspawn", "nsenter", "timeout"} {
		if _, err := lookPath(tool); err != nil {
			return tool + " not installed (Debian: apt-get install systemd-container util-linux coreutils)"
		}
	}
	return ""
}

// SkipOrFail skips a real-systemd test that cannot run on this machine, with
// the reason; under CI=true it fails instead, so CI never passes by skipping.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("real-systemd test cannot run: %s (CI=true: failing instead of skipping)", reason)
		return
	}
	t.Skipf("real-systemd test skipped: %s", reason)
}

// Boot starts a container, waits until its systemd is up, and registers its
// teardown with t.Cleanup.
func Boot(t testing.TB, opts Options) *Machine {
	t.Helper()
	requireEnv(t)
	for _, b := range opts.Binds {
		if !filepath.IsAbs(b) || filepath.Clean(b) == "/tmp" || filepath.Dir(filepath.Clean(b)) == "/" {
			t.Fatalf("nspawntest: bind %q: must be a test's own directory (absolute, not a top-level host directory)", b)
		}
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 60 * time.Second
	}
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Minute
	}
	name := "mcpt-" + randHex(t, 5)
	dir := t.TempDir() // registered before the teardown, so removed after it
	m := &Machine{
		Name:       name,
		Dir:        dir,
		UnitsDir:   filepath.Join(dir, "units"),
		BusAddress: "unix:path=" + filepath.Join(dir, "dbus", "system_bus_socket"),
		t:          t,
		opts:       opts,
	}
	for _, d := range []string{m.UnitsDir, filepath.Join(dir, "dbus")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh machine-id: without one systemd runs first-boot presets and
	// enables every vendor unit.
	if err := os.WriteFile(filepath.Join(dir, "machine-id"), []byte(randHex(t, 16)+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			m.dumpLogs()
		}
		if err := m.stop(); err != nil {
			t.Errorf("nspawntest teardown of %s: %v", m.Name, err)
		}
	})
	if err := m.start(); err != nil {
		t.Fatalf("nspawntest: boot %s: %v", name, err)
	}
	return m
}

// Leader is the host PID of the container's systemd (its PID 1).
func (m *Machine) Leader() int { return m.leader }

// Command returns a command that runs argv inside the container (all its
// namespaces, through nsenter) with a plain root environment.
func (m *Machine) Command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"--target", strconv.Itoa(m.leader), "--all", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
		"SYSTEMD_PAGER=",
		"SYSTEMD_COLORS=0",
	}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Exec runs argv inside the container and returns its stdout; the error
// carries the exit status and stderr.
func (m *Machine) Exec(ctx context.Context, argv ...string) (string, error) {
	cmd := m.Command(ctx, argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w\nstderr: %s", strings.Join(argv, " "), err, errb.String())
	}
	return out.String(), nil
}

// Reboot stops the container and boots it again with the same machine-id,
// units dir and binds, as a host reboot would (the transient units and
// everything in its tmpfs are gone, the bound directories stay). Client is
// replaced by a new connection. t is the calling (sub)test.
func (m *Machine) Reboot(t testing.TB) {
	t.Helper()
	if err := m.stop(); err != nil {
		t.Fatalf("nspawntest: reboot %s: stop: %v", m.Name, err)
	}
	if err := m.start(); err != nil {
		t.Fatalf("nspawntest: reboot %s: boot: %v", m.Name, err)
	}
}

func (m *Machine) start() error {
	// A socket left by the previous boot would look like a bus.
	_ = os.Remove(filepath.Join(m.Dir, "dbus", "system_bus_socket"))
	// Where PID 1 is not systemd, nspawn needs --keep-unit, and then the
	// container lives in its launcher's cgroup: give each launcher its own,
	// so that two containers do not collide.
	m.cgroups = nil
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			continue
		}
		cg := filepath.Join(root, "ct-"+m.Name)
		if err := os.Mkdir(cg, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		m.cgroups = append(m.cgroups, cg)
	}
	args := []string{
		"--quiet", "--directory=/", "--volatile=yes", "--register=no", "--keep-unit",
		"--machine=" + m.Name, "--console=read-only", "--link-journal=no",
		"--bind-ro=" + filepath.Join(m.Dir, "machine-id") + ":/etc/machine-id",
		"--bind=" + m.UnitsDir + ":/etc/systemd/system",
		"--bind=" + filepath.Join(m.Dir, "dbus") + ":/run/dbus",
	}
	for _, b := range m.opts.Binds {
		args = append(args, "--bind="+b)
	}
	args = append(args, "--boot", "systemd.firstboot=off", "systemd.mask=systemd-machine-id-commit.service", "systemd.getty_auto=0")

	// The wrapper moves itself into the cgroups, then becomes timeout(1),
	// which kills nspawn after the TTL even if this process is gone.
	script := `for c in $CGS; do echo $$ > "$c/cgroup.procs" || exit 1; done; exec "$@"`
	argv := append([]string{"-c", script, "sh", "timeout", "--kill-after=15", strconv.Itoa(int(m.opts.TTL.Seconds())), "systemd-nspawn"}, args...)
	log, err := os.OpenFile(filepath.Join(m.Dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("/bin/sh", argv...)
	cmd.Env = append(os.Environ(), "CGS="+strings.Join(m.cgroups, " "))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start systemd-nspawn: %w", err)
	}
	m.cmd = cmd
	m.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.done) }()

	ctx, cancel := context.WithTimeout(context.Background(), m.opts.BootTimeout)
	defer cancel()
	state, err := m.waitRunning(ctx)
	if err != nil {
		return fmt.Errorf("%w (last SystemState %q)\n%s", err, state, m.tail("console.log"))
	}
	// PIDs: timeout -> systemd-nspawn -> the container's PID 1.
	nspawn, err := firstChild(cmd.Process.Pid)
	if err == nil {
		m.leader, err = firstChild(nspawn)
	}
	if err != nil {
		return fmt.Errorf("find the container's PID 1: %w", err)
	}
	return nil
}

func (m *Machine) waitRunning(ctx context.Context) (string, error) {
	var last string
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if m.Client == nil {
			if c, err := systemd.Connect(ctx, systemd.Options{Address: m.BusAddress}); err == nil {
				m.Client = c
			}
		}
		if m.Client != nil {
			s, err := m.Client.SystemState(ctx)
			if err == nil {
				last = s
				if s == "running" || s == "degraded" {
					return s, nil
				}
			}
		}
		select {
		case <-m.done:
			return last, errors.New("systemd-nspawn exited during boot")
		case <-ctx.Done():
			return last, fmt.Errorf("not running after %s: %w", m.opts.BootTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the container and removes its cgroups. Safe to call twice.
func (m *Machine) stop() error {
	if m.Client != nil {
		m.Client.Close()
		m.Client = nil
	}
	var errs []error
	if m.cmd != nil {
		// SIGTERM: timeout passes it to nspawn, which asks systemd to power
		// off (SIGKILL would leave the container's systemd running).
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(15 * time.Second):
			errs = append(errs, errors.New("systemd-nspawn ignored SIGTERM for 15s; killing its cgroup"))
		}
	}
	// Fallback: kill whatever is left in the launcher's cgroups.
	for _, cg := range m.cgroups {
		killCgroup(cg)
	}
	if m.cmd != nil {
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("systemd-nspawn still alive after its cgroup was killed"))
		}
		m.cmd = nil
	}
	for _, cg := range m.cgroups {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
	}
	m.cgroups = nil
	_ = os.Remove(filepath.Join("/run/systemd/nspawn/propagate", m.Name))
	m.leader = 0
	return errors.Join(errs...)
}

// killCgroup kills every process of cg and its children: cgroup.kill where
// the kernel has it (v2), SIGKILL to each listed process otherwise (v1).
func killCgroup(cg string) {
	if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for i := 0; i < 50; i++ {
		n := 0
		_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroup removes cg and its sub-cgroups, deepest first, retrying while
// the last processes exit.
func removeCgroup(cg string) error {
	var err error
	for i := 0; i < 50; i++ {
		var dirs []string
		_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, werr error) error {
			if werr == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		err = nil
		for j := len(dirs) - 1; j >= 0; j-- {
			if e := os.Remove(dirs[j]); e != nil && !errors.Is(e, fs.ErrNotExist) {
				err = e
			}
		}
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", cg, err)
}

func firstChild(pid int) (int, error) {
	var last error
	for i := 0; i < 50; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
			err = fmt.Errorf("pid %d has no children", pid)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return 0, last
}

func (m *Machine) dumpLogs() {
	if m.leader != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := m.Exec(ctx, "journalctl", "--no-pager", "-o", "short-monotonic", "-n", "150")
		cancel()
		m.t.Logf("nspawntest %s: journal (last 150 lines):\n%s%v", m.Name, out, errOrEmpty(err))
	}
	m.t.Logf("nspawntest %s: console:\n%s", m.Name, m.tail("console.log"))
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (m *Machine) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	buildDir   string
)

// BuildBinary builds the main package pkg of this module (e.g.
// "./cmd/mcp-backend") with buildinfo.Version set to version, once per test
// process, and returns the binary's path. The binary lives in a per-process
// directory under the temp dir; directories of finished processes are
// removed by the next build.
func BuildBinary(t testing.TB, pkg, version string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := pkg + "@" + version
	if p, ok := buildCache[key]; ok {
		return p
	}
	if buildDir == "" {
		sweepBuildDirs()
		d := filepath.Join(os.TempDir(), fmt.Sprintf("nspawntest-bin-%d", os.Getpid()))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("BuildBinary: go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		t.Fatal("BuildBinary: not inside a Go module")
	}
	out := filepath.Join(buildDir, fmt.Sprintf("%s-%s-%d", filepath.Base(pkg), sanitize(version), len(buildCache)))
	ldflags := "-X github.com/overdeck/mcp-backend/internal/buildinfo.Version=" + version
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("BuildBinary %s: %v\n%s", key, err, b)
	}
	buildCache[key] = out
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

func sweepBuildDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "nspawntest-bin-*"))
	for _, d := range matches {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "nspawntest-bin-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(d)
		}
	}
}

// CopyExecutable copies the file src to dst (creating dst's directory) with
// mode 0755, e.g. a built binary into a directory bound into the container.
func CopyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
