// Package nspawn boots a disposable, real systemd: the host's own OS under
// systemd-nspawn --volatile=yes (a tmpfs root over the host's read-only
// /usr), with only the caller's own directories bound in. A Machine has a
// connected systemd client, a way to run commands inside (nsenter, as an
// operator would), a reboot, and a Close that leaves nothing behind.
// StartSSHD runs an sshd inside one on its own loopback port, so that
// several containers are several SSH hosts (the fleet's tests and demo).
//
// It has no testing dependency, so programs (the demo) use it as well as
// tests; nspawn/nspawntest wraps it for tests. It needs root and
// systemd-nspawn: Unavailable says why a machine cannot run one.
package nspawn

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
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/systemd"
)

// Options configure Boot.
type Options struct {
	// Binds are host directories bound read-write at the same path inside,
	// so paths in units and configs mean the same on both sides. They must be
	// the caller's own directories, never a live host directory such as /tmp.
	Binds []string
	// BootTimeout bounds the wait for SystemState running/degraded; 60s when
	// zero.
	BootTimeout time.Duration
	// TTL kills the container even if the calling process dies without
	// cleaning up; 15 minutes when zero.
	TTL time.Duration
}

// Machine is one booted container.
type Machine struct {
	// Name is the machine name, unique per Boot.
	Name string
	// Dir holds the container's host-side files: units/, dbus/, machine-id,
	// console.log. Boot creates it and Close removes it.
	Dir string
	// UnitsDir is bound at /etc/systemd/system inside.
	UnitsDir string
	// BusAddress is the container's system bus, reachable from the host.
	BusAddress string
	// Client is connected to the container's systemd through BusAddress; a
	// Reboot replaces it.
	Client *systemd.Client

	opts    Options
	cgroups []string
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	leader  int
}

// CIEnforced reports whether a machine that cannot run a container must be
// treated as a failure rather than a reason to skip: under CI=true, so that
// CI never passes by skipping.
func CIEnforced() bool { return os.Getenv("CI") == "true" }

// Unavailable says why this machine cannot run a container, or "" when it
// can.
func Unavailable() string { return unavailable(os.Geteuid(), exec.LookPath) }

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

// Boot starts a container and waits until its systemd is up. The caller
// must Close the machine, also when a later step fails. ctx bounds only the
// boot; the container lives until Close (or its TTL).
func Boot(ctx context.Context, opts Options) (*Machine, error) {
	for _, b := range opts.Binds {
		if !filepath.IsAbs(b) || filepath.Clean(b) == "/tmp" || filepath.Dir(filepath.Clean(b)) == "/" {
			return nil, fmt.Errorf("nspawn: bind %q: must be the caller's own directory (absolute, not a top-level host directory)", b)
		}
	}
	if reason := Unavailable(); reason != "" {
		return nil, fmt.Errorf("nspawn: cannot boot a container here: %s", reason)
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 60 * time.Second
	}
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Minute
	}
	id, err := randHex(5)
	if err != nil {
		return nil, err
	}
	name := "mcpt-" + id
	dir, err := os.MkdirTemp("", "nspawn-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("nspawn: machine dir: %w", err)
	}
	m := &Machine{
		Name:       name,
		Dir:        dir,
		UnitsDir:   filepath.Join(dir, "units"),
		BusAddress: "unix:path=" + filepath.Join(dir, "dbus", "system_bus_socket"),
		opts:       opts,
	}
	fail := func(err error) (*Machine, error) {
		return nil, errors.Join(err, m.Close())
	}
	for _, d := range []string{m.UnitsDir, filepath.Join(dir, "dbus")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(fmt.Errorf("nspawn: %w", err))
		}
	}
	// A fresh machine-id: without one systemd runs first-boot presets and
	// enables every vendor unit.
	mid, err := randHex(16)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "machine-id"), []byte(mid+"\n"), 0o444); err != nil {
		return fail(fmt.Errorf("nspawn: %w", err))
	}
	if err := m.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("nspawn: boot %s: %w", name, err), m.Close())
	}
	return m, nil
}

// Leader is the host PID of the container's systemd (its PID 1).
func (m *Machine) Leader() int { return m.leader }

// Cgroups are the host cgroups the container lives in; Close removes them.
func (m *Machine) Cgroups() []string { return append([]string(nil), m.cgroups...) }

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
	// nsenter runs argv as its child and does not pass signals on: when ctx
	// ends, kill that child (by its PID) as well as nsenter itself, or the
	// command would live on inside the container.
	cmd.Cancel = func() error {
		if kids, err := children(cmd.Process.Pid); err == nil {
			for _, k := range kids {
				_ = syscall.Kill(k, syscall.SIGKILL)
			}
		}
		return cmd.Process.Kill()
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

// Run runs argv inside the container and returns its exit code with its
// stdout and stderr. A non-zero exit is a result, not an error: err is set
// only when argv did not run to an exit of its own (not started, or cut by
// ctx), and then code is -1.
func (m *Machine) Run(ctx context.Context, argv ...string) (code int, stdout, stderr string, err error) {
	cmd := m.Command(ctx, argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String(), nil
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), out.String(), errb.String(), nil
	}
	return -1, out.String(), errb.String(), fmt.Errorf("%s: %w\nstderr: %s", strings.Join(argv, " "), err, errb.String())
}

// Reboot stops the container and boots it again with the same machine-id,
// units dir and binds, as a host reboot would (the transient units and
// everything in its tmpfs are gone, the bound directories stay). Client is
// replaced by a new connection.
func (m *Machine) Reboot(ctx context.Context) error {
	if err := m.stop(); err != nil {
		return fmt.Errorf("nspawn: reboot %s: stop: %w", m.Name, err)
	}
	if err := m.start(ctx); err != nil {
		return fmt.Errorf("nspawn: reboot %s: boot: %w", m.Name, err)
	}
	return nil
}

// Close stops the container, removes its cgroups and its Dir. Safe to call
// twice.
func (m *Machine) Close() error {
	err := m.stop()
	if m.Dir != "" {
		if rerr := os.RemoveAll(m.Dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("nspawn: remove %s: %w", m.Dir, rerr))
		}
		m.Dir = ""
	}
	if err != nil {
		return fmt.Errorf("nspawn: teardown of %s: %w", m.Name, err)
	}
	return nil
}

func (m *Machine) start(ctx context.Context) error {
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
	// Not CommandContext: ctx bounds the boot, not the container's life.
	cmd := exec.Command("/bin/sh", argv...)
	cmd.Env = append(os.Environ(), "CGS="+strings.Join(m.cgroups, " "))
	cmd.Stdout, cmd.Stderr = log, log
	// Its own session: a Ctrl-C at the caller's terminal reaches the caller,
	// which tears the container down in order, not nspawn directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start systemd-nspawn: %w", err)
	}
	m.cmd = cmd
	m.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.done) }()

	ctx, cancel := context.WithTimeout(ctx, m.opts.BootTimeout)
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
			return last, fmt.Errorf("not running within %s: %w", m.opts.BootTimeout, ctx.Err())
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

// children lists pid's child processes.
func children(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if k, err := strconv.Atoi(f); err == nil {
			out = append(out, k)
		}
	}
	return out, nil
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

// Logs returns the last lines of the container's journal (while it runs)
// and of its console, for diagnosing a failure.
func (m *Machine) Logs(ctx context.Context) string {
	var b strings.Builder
	if m.leader != 0 {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := m.Exec(ctx, "journalctl", "--no-pager", "-o", "short-monotonic", "-n", "150")
		cancel()
		fmt.Fprintf(&b, "%s journal (last 150 lines):\n%s", m.Name, out)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
		}
	}
	fmt.Fprintf(&b, "%s console:\n%s", m.Name, m.tail("console.log"))
	return b.String()
}

func (m *Machine) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func randHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("nspawn: random name: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// BuildBinary builds the main package pkg of the Go module around the
// current directory (e.g. "./cmd/mcp-backend") with buildinfo.Version set
// to version and the build tags tags, into dir, and returns the binary's
// path.
func BuildBinary(ctx context.Context, pkg, version, dir string, tags ...string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("build %s: go env GOMOD: %w", pkg, err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", fmt.Errorf("build %s: not inside a Go module (run from the repository)", pkg)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	out := filepath.Join(dir, filepath.Base(pkg)+"-"+sanitize(version))
	ldflags := "-X github.com/overdeck/mcp-backend/internal/buildinfo.Version=" + version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", strings.Join(tags, ","), "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s@%s: %w\n%s", pkg, version, err, b)
	}
	return out, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// CopyExecutable copies the file src to dst (creating dst's directory) with
// mode 0755, e.g. a built binary into a directory bound into the container.
func CopyExecutable(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy executable: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy executable: %w", err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return fmt.Errorf("copy executable: %w", err)
	}
	return nil
}
