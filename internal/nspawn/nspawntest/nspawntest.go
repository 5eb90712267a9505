// Package nspawntest adapts package nspawn to tests: Boot registers the
// container's teardown with t.Cleanup (dumping its journal when the test
// failed), and a machine that cannot run a container skips the test, except
// under CI=true, where it fails. Hosts sets up several containers as the
// SSH hosts of a fleet (mcpctl.json, loopback ports, sshd, an installed
// build), for the fleet's and the Ansible collection's tests alike.
//
// It is a normal package, not a _test file, so tests of every package can
// use it.
package nspawntest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/overdeck/mcp-backend/internal/nspawn"
)

// Options configure Boot.
type Options = nspawn.Options

// Machine is one booted container, torn down when its test ends.
type Machine struct {
	*nspawn.Machine
}

// Require skips a container test under -short (the fast tier, `./task
// test:fast`), and otherwise skips (or, under CI=true, fails) when this
// machine cannot run a container. Boot, RequireSSH and BuildBinary call it;
// a test with costly set-up before those calls it first.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("container test: skipped under -short")
	}
	if reason := nspawn.Unavailable(); reason != "" {
		SkipOrFail(t, "%s", reason)
	}
}

// SkipOrFail skips a real-systemd test that cannot run on this machine, with
// the reason; under CI=true it fails instead, so CI never passes by skipping.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if nspawn.CIEnforced() {
		t.Fatalf("real-systemd test cannot run: %s (CI=true: failing instead of skipping)", reason)
		return
	}
	t.Skipf("real-systemd test skipped: %s", reason)
}

// Boot starts a container, waits until its systemd is up, and registers its
// teardown with t.Cleanup.
func Boot(t testing.TB, opts Options) *Machine {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nm, err := nspawn.Boot(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &Machine{Machine: nm}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(m.Logs(context.Background()))
		}
		if err := m.Close(); err != nil {
			t.Errorf("nspawntest: %v", err)
		}
	})
	return m
}

// Reboot stops the container and boots it again (see nspawn.Machine.Reboot).
// t is the calling (sub)test.
func (m *Machine) Reboot(t testing.TB) {
	t.Helper()
	if err := m.Machine.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
	buildDir   string
)

// TestTags is the build tag of the test hooks a test build carries and a
// production build leaves out (mcpctl's pause inside a takeover).
const TestTags = "testhooks"

// BuildBinary builds the main package pkg of this module (e.g.
// "./cmd/mcp-backend") with buildinfo.Version set to version and the test
// hooks in (TestTags), once per test process, and returns the binary's
// path. The binary lives in a per-process
// directory under the temp dir; directories of finished processes are
// removed by the next build.
func BuildBinary(t testing.TB, pkg, version string) string {
	t.Helper()
	Require(t) // only container tests build binaries to run inside
	buildMu.Lock()
	defer buildMu.Unlock()
	key := pkg + "@" + version
	if p, ok := buildCache[key]; ok {
		return p
	}
	if buildDir == "" {
		sweepBuildDirs()
		buildDir = filepath.Join(os.TempDir(), fmt.Sprintf("nspawntest-bin-%d", os.Getpid()))
	}
	// One subdirectory per build: two packages may share a base name.
	out, err := nspawn.BuildBinary(context.Background(), pkg, version, filepath.Join(buildDir, strconv.Itoa(len(buildCache))), TestTags)
	if err != nil {
		t.Fatalf("BuildBinary: %v", err)
	}
	buildCache[key] = out
	return out
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
	if err := nspawn.CopyExecutable(src, dst); err != nil {
		t.Fatal(err)
	}
}
