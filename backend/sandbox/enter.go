package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Enter is `mcp-backend sandbox-exec`: in the mount namespace (and, when
// the profile has no network, the network namespace) its parent unshared
// for it, it sets the profile up and execs argv, or returns why it could
// not (the command then never runs). In order: the mounts made private;
// writable paths bound; every mask covered; with ReadOnly, every mount
// remounted read-only but the writable ones, and a private /tmp; the
// bounding set cut to the kept capabilities; groups, gid and uid; the
// kept capabilities (ambient, for a non-root user); no new privileges;
// the system call filter; exec. Everything happens on one OS thread,
// the one that execs: credentials, capabilities and filters are per
// thread.
func Enter(specJSON string, argv []string) error {
	runtime.LockOSThread() // never unlocked: this thread execs or the helper exits
	var s Spec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		return fmt.Errorf("sandbox-exec: --spec: %w", err)
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return errors.New("sandbox-exec: want an absolute program after --")
	}
	// The working directory as a path, entered again once the mounts
	// are in place: the one inherited still points below any mask.
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("sandbox-exec: working directory: %w", err)
	}
	if err := setupMounts(&s); err != nil {
		return fmt.Errorf("sandbox-exec: profile %s: %w", s.Profile, err)
	}
	if err := setupCreds(&s); err != nil {
		return fmt.Errorf("sandbox-exec: profile %s: %w", s.Profile, err)
	}
	if err := enterDir(s.Dir, wd); err != nil {
		return fmt.Errorf("sandbox-exec: profile %s: %w", s.Profile, err)
	}
	if err := loadFilter(s.Seccomp); err != nil {
		return fmt.Errorf("sandbox-exec: profile %s: system call filter: %w", s.Profile, err)
	}
	err = unix.Exec(argv[0], argv, os.Environ())
	return fmt.Errorf("sandbox-exec: exec %s: %w", argv[0], err)
}

func setupMounts(s *Spec) error {
	// Nothing below reaches the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The processes to hide, and their threads, read before any mask.
	var procs []string
	for _, pid := range append(slices.Clone(s.HidePIDs), os.Getppid()) {
		if pid <= 1 {
			continue
		}
		dir := "/proc/" + strconv.Itoa(pid)
		procs = append(procs, dir)
		tasks, _ := os.ReadDir(dir + "/task")
		for _, t := range tasks {
			if t.Name() != strconv.Itoa(pid) {
				procs = append(procs, "/proc/"+t.Name())
			}
		}
	}
	var writable []string
	if s.ReadOnly {
		for _, w := range s.Writable {
			if _, err := os.Stat(w); err != nil {
				continue // nothing to write there
			}
			// Its own mount, so the read-only pass can tell it apart.
			if err := unix.Mount(w, w, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind writable %s: %w", w, err)
			}
			writable = append(writable, w)
		}
	}
	for _, p := range maskTargets(s.Mask, filepath.Glob) {
		if err := mask(p); err != nil {
			return err
		}
	}
	// The backend's own /proc: its environment, memory and descriptors
	// (PR_SET_DUMPABLE alone leaves them to any root process on some
	// kernels).
	for _, p := range procs {
		if err := unix.Mount("mcp-sandbox-mask", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=000"); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	if !s.ReadOnly {
		return nil
	}
	mounts, err := mountPoints()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if slices.ContainsFunc(writable, func(w string) bool { return m.dir == w || strings.HasPrefix(m.dir, w+"/") }) {
			continue
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
		flags |= m.flags
		if err := unix.Mount("", m.dir, "", flags, ""); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
				continue // covered by a mask, or gone
			}
			return fmt.Errorf("remount %s read-only: %w", m.dir, err)
		}
	}
	if err := unix.Mount("mcp-sandbox-tmp", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=256m"); err != nil {
		return fmt.Errorf("private /tmp: %w", err)
	}
	return nil
}

// mask covers p: a directory with an empty read-only tmpfs, anything
// else with /dev/null bound read-only. A path that is not there needs
// nothing.
func mask(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return nil
	}
	if fi.IsDir() {
		if err := unix.Mount("mcp-sandbox-mask", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=000"); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		return nil
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mask %s read-only: %w", p, err)
	}
	return nil
}

type mountPoint struct {
	dir   string
	flags uintptr // the per-mount flags a bind remount must keep
}

// mountPoints lists this namespace's mounts from /proc/self/mountinfo.
func mountPoints() ([]mountPoint, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []mountPoint
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 {
			continue
		}
		m := mountPoint{dir: unescapeMount(fs[4])}
		for _, o := range strings.Split(fs[5], ",") {
			switch o {
			case "nosuid":
				m.flags |= unix.MS_NOSUID
			case "nodev":
				m.flags |= unix.MS_NODEV
			case "noexec":
				m.flags |= unix.MS_NOEXEC
			case "noatime":
				m.flags |= unix.MS_NOATIME
			case "nodiratime":
				m.flags |= unix.MS_NODIRATIME
			case "relatime":
				m.flags |= unix.MS_RELATIME
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func setupCreds(s *Spec) error {
	// The bounding set first, while this thread still has CAP_SETPCAP.
	for c := 0; c <= lastCap; c++ {
		if slices.Contains(s.Caps, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %s from the bounding set: %w", capNames[c], err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if s.UID != 0 && len(s.Caps) > 0 {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("keep capabilities: %w", err)
		}
	}
	groups := s.Groups
	if groups == nil {
		groups = []int{}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups %v: %w", groups, err)
	}
	if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", s.GID, err)
	}
	if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", s.UID, err)
	}
	// What this thread holds: exactly the kept capabilities (root's
	// exec recomputes them from the bounding set; another user's carry
	// over as ambient ones).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var have, data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &have[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	// A capability the backend itself lacks cannot be kept: the
	// profile's set is what the backend holds of it.
	s.Caps = slices.DeleteFunc(s.Caps, func(c int) bool { return have[c/32].Permitted&(1<<(c%32)) == 0 })
	for _, c := range s.Caps {
		data[c/32].Permitted |= 1 << (c % 32)
		data[c/32].Effective |= 1 << (c % 32)
		if s.UID != 0 {
			data[c/32].Inheritable |= 1 << (c % 32) // ambient needs it
		}
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if s.UID != 0 {
		for _, c := range s.Caps {
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
				return fmt.Errorf("raise ambient %s: %w", capNames[c], err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no new privileges: %w", err)
	}
	return nil
}

// enterDir enters the call's working directory, which must exist in the
// command's view; without one, the inherited directory, or / when the
// profile's mounts hid it.
func enterDir(asked, inherited string) error {
	if asked != "" {
		if err := os.Chdir(asked); err != nil {
			return fmt.Errorf("working directory %s: %w", asked, err)
		}
		return nil
	}
	if os.Chdir(inherited) == nil {
		return nil
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("working directory /: %w", err)
	}
	return nil
}
