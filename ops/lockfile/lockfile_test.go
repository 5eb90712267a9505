package lockfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the other process holding the lock: flock is
// per open file, but only another process proves that waiting works across
// processes as mcpctl's commands meet.
const envHold = "LOCKFILE_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(envHold); path != "" {
		os.Exit(hold(path))
	}
	os.Exit(m.Run())
}

// hold takes the lock at path as "holder --test", says "locked PID", and
// holds it until stdin closes.
func hold(path string) int {
	l, err := Take(context.Background(), path, "holder --test", Options{})
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	fmt.Println("locked", os.Getpid())
	io.Copy(io.Discard, os.Stdin)
	if err := l.Release(); err != nil {
		return 3
	}
	return 0
}

type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
}

// startHolder runs a holder process and returns once it holds the lock.
func startHolder(t testing.TB, path string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+path)
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
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "locked" {
		t.Fatalf("holder: %q, %v", line, err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	h.pid, _ = strconv.Atoi(f[1])
	return h
}

// release makes the holder let go and exit.
func (h *holder) release(t testing.TB) {
	t.Helper()
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder exited with %v", err)
	}
}

// TestTakeWaitsForAHolderThatLetsGo: a taker that finds the lock held says
// so once, naming the holder, announces its intent while it waits, and gets
// the lock when the holder lets go.
func TestTakeWaitsForAHolderThatLetsGo(t *testing.T) {
	dir := t.TempDir()
	path, intent := filepath.Join(dir, "lock"), filepath.Join(dir, "lock.intent")
	h := startHolder(t, path)
	if Wanted(intent) {
		t.Fatal("Wanted before anyone waits")
	}
	told := make(chan *Holder, 10)
	type taken struct {
		l   *Lock
		err error
	}
	done := make(chan taken, 1)
	go func() {
		l, err := Take(context.Background(), path, "cutover", Options{Wait: 10 * time.Minute, Intent: intent,
			Waiting: func(h *Holder) { told <- h }})
		done <- taken{l, err}
	}()
	who := <-told
	if who == nil || who.PID != h.pid || who.Owner != "holder --test" {
		t.Fatalf("told %+v, want the holder pid %d", who, h.pid)
	}
	if !Wanted(intent) {
		t.Fatal("not Wanted while a taker waits")
	}
	select {
	case r := <-done:
		t.Fatalf("Take returned while the lock was held: %v", r.err)
	default:
	}
	h.release(t)
	r := <-done
	if r.err != nil {
		t.Fatalf("Take after the holder let go: %v", r.err)
	}
	if len(told) != 0 {
		t.Fatalf("told %d more times, want once", len(told))
	}
	if !Wanted(intent) {
		t.Fatal("not Wanted while the taker holds the lock")
	}
	if got := ReadHolder(path); got == nil || got.PID != os.Getpid() || got.Owner != "cutover" || got.Seq != 2 {
		t.Fatalf("ReadHolder = %+v, want this process, seq 2", got)
	}
	if err := r.l.Release(); err != nil {
		t.Fatal(err)
	}
	if Wanted(intent) || ReadHolder(path) != nil || ReadSeq(path) != 2 {
		t.Fatalf("after release: wanted %v holder %+v seq %d", Wanted(intent), ReadHolder(path), ReadSeq(path))
	}
}

// TestTakeGivesUpAfterTheBound: a holder that never lets go yields the
// error naming it once the (short) bound has passed, and the taker's intent
// is gone with it.
func TestTakeGivesUpAfterTheBound(t *testing.T) {
	dir := t.TempDir()
	path, intent := filepath.Join(dir, "lock"), filepath.Join(dir, "lock.intent")
	h := startHolder(t, path)
	told := 0
	_, err := Take(context.Background(), path, "cutover", Options{Wait: 300 * time.Millisecond, Intent: intent,
		Waiting: func(*Holder) { told++ }})
	var le *LockedError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.Holder == nil || le.Holder.PID != h.pid {
		t.Fatalf("Take = %v, want a LockedError naming pid %d", err, h.pid)
	}
	for _, want := range []string{strconv.Itoa(h.pid), "holder --test", "still held after waiting 300ms", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if told != 1 {
		t.Fatalf("told %d times, want once", told)
	}
	if Wanted(intent) {
		t.Fatal("intent left behind by a taker that gave up")
	}
	// Without a wait: at once, and the message says to wait.
	if _, err := Take(context.Background(), path, "x", Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "wait for it to finish") {
		t.Fatalf("Take without a wait = %v", err)
	}
	// A cancelled context ends the wait too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Take(ctx, path, "x", Options{Wait: time.Hour}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Take with a cancelled context = %v", err)
	}
}

// TestSeqCountsEveryTake: the count survives releases and a SIGKILLed
// holder, so a reader that saw n and then takes n+1 knows nobody came
// between.
func TestSeqCountsEveryTake(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lock")
	if ReadSeq(path) != 0 {
		t.Fatal("seq before the first take")
	}
	for want := uint64(1); want <= 3; want++ {
		l, err := Take(context.Background(), path, "x", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Seq() != want || ReadSeq(path) != want {
			t.Fatalf("take %d: seq %d, file %d", want, l.Seq(), ReadSeq(path))
		}
		l.Release()
		l.Release() // twice is fine
	}
	h := startHolder(t, path)
	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Wait()
	if ReadHolder(path) != nil {
		t.Fatal("a killed holder is still reported")
	}
	l, err := Take(context.Background(), path, "after kill", Options{})
	if err != nil {
		t.Fatalf("Take after the holder was killed: %v", err)
	}
	defer l.Release()
	if l.Seq() != 5 {
		t.Fatalf("seq after a killed holder's take 4: %d, want 5", l.Seq())
	}
}
