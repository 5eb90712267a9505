// Package proctest holds what tests of real processes and servers share:
// free loopback ports, bounded polling, and process liveness by pid. It is a
// normal package (not a _test file) so every package's tests can use it.
package proctest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/procfs"
)

// Eventually polls cond until it holds, failing the test after a minute.
// It bounds a wait; it times nothing: a condition that holds returns at
// once, and on a starved 2-core machine under -race setting up 140 calls
// and 40 commands took longer than the 20 s this gave up after before.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Alive reports whether pid exists and is not a zombie. Orphans are
// reparented to a PID 1 that may not reap them, so a zombie counts as dead.
func Alive(pid int) bool {
	st, ok := procfs.Read(pid)
	return ok && st.State != "Z" && st.State != "X"
}

// WaitDead waits (bounded) until none of pids is alive.
func WaitDead(t testing.TB, pids ...int) {
	t.Helper()
	Eventually(t, "pids "+fmtInts(pids)+" to die", func() bool {
		for _, p := range pids {
			if Alive(p) {
				return false
			}
		}
		return true
	})
}

// ReadPids waits (bounded) until file holds at least n pids, whitespace
// separated, and returns the first n.
func ReadPids(t testing.TB, file string, n int) []int {
	t.Helper()
	var pids []int
	Eventually(t, strconv.Itoa(n)+" pids in "+file, func() bool {
		b, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("bad pid %q in %s", f, file)
			}
			pids = append(pids, p)
		}
		return len(pids) >= n
	})
	return pids[:n]
}

func fmtInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, " ")
}
