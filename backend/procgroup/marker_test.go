package procgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/procfs"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestInExecWindowOfRealProcesses: what the marker kill waits for, judged
// on real processes: a live process younger than since with no
// environment may be mid-execve; an older one, a kernel thread and a
// zombie are not.
func TestInExecWindowOfRealProcesses(t *testing.T) {
	me, ok := procfs.Read(os.Getpid())
	if !ok {
		t.Fatal("no /proc stat of this process")
	}
	self := me.StartTicks
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{} // shows no environment, as a process mid-execve does
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	child := cmd.Process.Pid
	st, ok := procfs.Read(child)
	childStart := st.StartTicks
	if !ok || childStart < self {
		t.Fatalf("child start %d (ok %v) before this process's %d", childStart, ok, self)
	}
	if !inExecWindow(child, self) {
		t.Errorf("a live user process with no environment, started after since, is not waited for")
	}
	if inExecWindow(child, childStart+1) {
		t.Errorf("a process older than since is waited for")
	}
	if inExecWindow(2, 0) && isKthread(t, 2) {
		t.Errorf("kernel thread 2 is waited for")
	}
	_ = cmd.Process.Kill()
	// Not reaped yet: a zombie.
	proctest.Eventually(t, "the killed child is a zombie", func() bool {
		st, ok := procfs.Read(child)
		return ok && st.State == "Z"
	})
	if inExecWindow(child, 0) {
		t.Errorf("a zombie is waited for")
	}
}

func isKthread(t testing.TB, pid int) bool {
	t.Helper()
	st, ok := procfs.Read(pid)
	return ok && st.Flags&pfKthread != 0
}

// TestKillMarkedWaitsForAProcessInMidExecve: a process that shows no
// environment yet (as one between the halves of execve does, preempted on
// a loaded machine) and then runs with the marker is still killed: the
// passes that see it blank do not count as clean. A real process stands in
// for the kernel's window: it starts with an empty environment, blocks on
// a FIFO, and execs a marked program once the scan is under way. (With two
// clean passes only, the scan ended before the release and the marked
// process lived on: the survivors of TestForkingSpawnerLeavesNoSurvivors.)
func TestKillMarkedWaitsForAProcessInMidExecve(t *testing.T) {
	me, ok := procfs.Read(os.Getpid())
	if !ok {
		t.Fatal("no /proc stat of this process")
	}
	since := me.StartTicks
	fifo := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("%s=test.%d", MarkerVar, os.Getpid())
	// The shell exports the marker itself: an env(1) in between would show
	// an environment without it (the shell passes PWD), a phase a process
	// in mid-execve never has.
	cmd := exec.Command("/bin/sh", "-c", "read x < "+fifo+"; export "+marker+"; exec /bin/sleep 60")
	cmd.Env = []string{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	left := make(chan int, 1)
	go func() { left <- killMarked(marker, since) }()
	// Let the scan run a while with the process blank; the new code waits
	// for it however long this takes (up to execWindowWait), the old one
	// was done after two passes.
	time.Sleep(100 * time.Millisecond)
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "go")
	w.Close()
	if n := <-left; n != 0 {
		t.Fatalf("killMarked left %d marked processes", n)
	}
	proctest.Eventually(t, "the marked process killed", func() bool { return !proctest.Alive(child) })
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child ended with %v, want killed", err)
	}
}

// BenchmarkKillMarkedNothingLeft: what the marker kill adds to every
// shell.exec whose descendants are all gone (two clean passes over /proc).
func BenchmarkKillMarkedNothingLeft(b *testing.B) {
	me, _ := procfs.Read(os.Getpid())
	marker := fmt.Sprintf("%s=bench.%d", MarkerVar, os.Getpid())
	for b.Loop() {
		if n := killMarked(marker, me.StartTicks); n != 0 {
			b.Fatalf("%d marked processes", n)
		}
	}
}
