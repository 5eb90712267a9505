package state

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The test binary doubles as a lock-holding child process, because the lock
// must be process-level: a goroutine in the same process would not prove it.
const (
	envHolderDir   = "STATE_TEST_LOCK_HOLDER_DIR"
	envHolderSpawn = "STATE_TEST_LOCK_HOLDER_SPAWN"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envHolderDir); dir != "" {
		os.Exit(holdLock(dir))
	}
	os.Exit(m.Run())
}

// holdLock takes the lock, optionally starts a grandchild that would inherit
// a leaked descriptor, reports "locked PID GRANDCHILD" and holds the lock
// until stdin closes.
func holdLock(dir string) int {
	release, err := Dir(dir).Lock("holder --test")
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	grand := 0
	if os.Getenv(envHolderSpawn) != "" {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			fmt.Println("error", err)
			return 3
		}
		grand = c.Process.Pid
	}
	fmt.Println("locked", os.Getpid(), grand)
	io.Copy(io.Discard, os.Stdin)
	if err := release(); err != nil {
		return 3
	}
	return 0
}

type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
	grand int
}

// startHolder runs the test binary as a lock holder and waits until it holds.
func startHolder(t testing.TB, dir string, spawn bool) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHolderDir+"="+dir)
	if spawn {
		cmd.Env = append(cmd.Env, envHolderSpawn+"=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if h.grand != 0 {
			syscall.Kill(h.grand, syscall.SIGKILL)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("holder said nothing: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "locked" {
		t.Fatalf("holder: %q", line)
	}
	h.pid, _ = strconv.Atoi(f[1])
	h.grand, _ = strconv.Atoi(f[2])
	return h
}

func TestLockContentionBetweenProcesses(t *testing.T) {
	dir := t.TempDir()
	h := startHolder(t, dir, false)

	_, err := Dir(dir).Lock("cutover")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock while another process holds it = %v, want ErrLocked", err)
	}
	var le *LockedError
	if !errors.As(err, &le) || le.Holder == nil || le.Holder.PID != h.pid || le.Holder.Owner != "holder --test" {
		t.Fatalf("error does not name the holder pid %d: %v", h.pid, err)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(h.pid)) {
		t.Fatalf("message %q lacks the holder's pid", err)
	}
	if got := Dir(dir).ReadHolder(); got == nil || got.PID != h.pid {
		t.Fatalf("ReadHolder = %+v, want pid %d", got, h.pid)
	}

	// A clean release by the holder frees the lock and clears the record.
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder exited with %v", err)
	}
	if got := Dir(dir).ReadHolder(); got != nil {
		t.Fatalf("ReadHolder after release = %+v, want nil", got)
	}
	release, err := Dir(dir).Lock("cutover")
	if err != nil {
		t.Fatalf("Lock after the holder released: %v", err)
	}
	if got := Dir(dir).ReadHolder(); got == nil || got.PID != os.Getpid() || got.Owner != "cutover" {
		t.Fatalf("ReadHolder = %+v, want this process", got)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// TestLockDiesWithProcess kills -9 a holder whose child lives on: the lock
// must be free (no stale lock, no descriptor inherited by the child).
func TestLockDiesWithProcess(t *testing.T) {
	dir := t.TempDir()
	h := startHolder(t, dir, true)
	if h.grand == 0 {
		t.Fatal("holder did not start a grandchild")
	}
	if _, err := Dir(dir).Lock("x"); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock = %v, want ErrLocked while the holder lives", err)
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
	if err := syscall.Kill(h.grand, 0); err != nil {
		t.Fatalf("grandchild should still be alive for this test to mean anything: %v", err)
	}
	if got := Dir(dir).ReadHolder(); got != nil {
		t.Fatalf("ReadHolder after SIGKILL = %+v, want nil (process gone)", got)
	}
	release, err := Dir(dir).Lock("after kill")
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	release()
}

func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	release, err := Dir(dir).Lock("first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(dir).Lock("second"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock = %v, want ErrLocked", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
	r2, err := Dir(dir).Lock("third")
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	r2()
	if _, err := Dir("").Lock("x"); err == nil {
		t.Fatal("Lock with an empty state dir succeeded")
	}
}
