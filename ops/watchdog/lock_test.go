package watchdog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
)

// A watchdog round in another process, as mcp-watchdog.timer runs it beside
// a deploy: the test binary re-run with these variables. Its probe of
// tunnel a (slow: a probe made slow) or its restart of a's unit (slow: the
// act on the result) says so on stdout and blocks until stdin closes.
const (
	envRoundDir  = "WATCHDOG_TEST_ROUND_DIR"
	envRoundSlow = "WATCHDOG_TEST_ROUND_SLOW" // "probe" or "restart"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envRoundDir); dir != "" {
		os.Exit(round(dir, os.Getenv(envRoundSlow)))
	}
	os.Exit(m.Run())
}

type blockingRestarts struct{ block bool }

func (b blockingRestarts) Restart(context.Context, string) error {
	if b.block {
		fmt.Println("restarting")
		io.Copy(io.Discard, os.Stdin)
	}
	return nil
}

func roundConfig(dir string) *ctlconfig.Config {
	cfg := ctlconfig.Default()
	cfg.StateDir = dir
	cfg.Tunnels[0].URL, cfg.Tunnels[1].URL = "http://a", "http://b"
	return cfg
}

func round(dir, slow string) int {
	probe := func(_ context.Context, url string) error {
		if url != "http://a" {
			return nil
		}
		if slow == "probe" {
			fmt.Println("probing")
			io.Copy(io.Discard, os.Stdin)
		}
		return errors.New("connection refused")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rep, err := Run(context.Background(), roundConfig(dir), blockingRestarts{block: slow == "restart"}, nil, probe, log, 1)
	if err != nil {
		fmt.Println("error", err)
		return 3
	}
	b, _ := json.Marshal(rep)
	fmt.Printf("report %s\n", b)
	return 0
}

type roundProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// startRound runs a watchdog round in another process and returns once it
// says it is in its slow part.
func startRound(t *testing.T, dir, slow, says string) *roundProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRoundDir+"="+dir, envRoundSlow+"="+slow)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &roundProc{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(out)}
	if line, err := p.stdout.ReadString('\n'); strings.TrimSpace(line) != says {
		t.Fatalf("round said %q (%v), want %q", line, err, says)
	}
	return p
}

// finish lets the round go on and returns its report.
func (p *roundProc) finish(t *testing.T) *Report {
	t.Helper()
	p.stdin.Close()
	line, _ := p.stdout.ReadString('\n')
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("round: %v (%q)", err, line)
	}
	var rep Report
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &rep); err != nil {
		t.Fatalf("round said %q: %v", line, err)
	}
	return &rep
}

// TestDeployDuringASlowProbe: a deploy that starts while a watchdog round
// probes slowly gets the lock at once (the round probes without it), and the
// round then steps aside without acting on what it saw. On a round that
// held the lock across its probes the deploy's wait would run out, since
// this probe ends only once the deploy has the lock.
func TestDeployDuringASlowProbe(t *testing.T) {
	dir := t.TempDir()
	p := startRound(t, dir, "probe", "probing")
	release, err := state.Dir(dir).LockWait(context.Background(), "cutover --build x", 30*time.Second, nil)
	if err != nil {
		p.stdin.Close()
		t.Fatalf("deploy during a slow probe: %v", err)
	}
	rep := p.finish(t)
	if rep.Skipped != SkipWanted || len(rep.Restarted) != 0 {
		t.Fatalf("round under a deploy: %+v, want skipped (%s)", rep, SkipWanted)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if w, _ := state.Dir(dir).LoadWatchdog(); w != nil && w.Tunnel("a").ConsecutiveFailures != 0 {
		t.Fatalf("a failure seen during a deploy was counted: %+v", w.Tunnel("a"))
	}
}

// TestDeployWaitsForARoundActing: a deploy that meets a round acting on
// its results (holding the lock, here a slow restart) is told who holds
// the lock, waits, and gets it once the round ends.
func TestDeployWaitsForARoundActing(t *testing.T) {
	dir := t.TempDir()
	p := startRound(t, dir, "restart", "restarting")
	told := make(chan *state.Holder, 4)
	done := make(chan error, 1)
	go func() {
		release, err := state.Dir(dir).LockWait(context.Background(), "cutover --build x", 10*time.Minute,
			func(h *state.Holder) { told <- h })
		if err == nil {
			release()
		}
		done <- err
	}()
	h := <-told
	if h == nil || h.PID != p.cmd.Process.Pid || h.Owner != "watchdog" {
		t.Fatalf("deploy told %+v, want the round (pid %d, watchdog)", h, p.cmd.Process.Pid)
	}
	rep := p.finish(t)
	if err := <-done; err != nil {
		t.Fatalf("deploy after the round: %v", err)
	}
	if rep.Skipped != "" || len(rep.Restarted) != 1 {
		t.Fatalf("round: %+v, want one restart", rep)
	}
}

// TestRoundSkipsForAWaitingDeploy: a deploy that begins waiting for the
// lock while a round probes makes the round step aside, even once the
// lock is free again; so does anyone who took the lock in between.
func TestRoundSkipsForAWaitingDeploy(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("a deploy waits", func(t *testing.T) {
		dir := t.TempDir()
		d := state.Dir(dir)
		var r restarts
		done := make(chan error, 1)
		probe := func(_ context.Context, url string) error {
			if url != "http://a" {
				return nil
			}
			// Someone (a snapshot) holds the lock; a cutover starts waiting
			// for it; the snapshot lets go.
			other, err := d.TryLock("snapshot create")
			if err != nil {
				t.Fatal(err)
			}
			told := make(chan struct{})
			go func() {
				release, err := d.LockWait(context.Background(), "cutover --build x", 10*time.Minute, func(*state.Holder) { close(told) })
				if err == nil {
					release()
				}
				done <- err
			}()
			<-told
			other.Release()
			return errors.New("connection refused")
		}
		rep, err := Run(context.Background(), roundConfig(dir), &r, nil, probe, log, 1)
		if err != nil || rep.Skipped != SkipWanted || len(r) != 0 {
			t.Fatalf("round: %+v, %v, restarts %v; want skipped (%s)", rep, err, r, SkipWanted)
		}
		if err := <-done; err != nil {
			t.Fatalf("deploy: %v", err)
		}
	})
	t.Run("someone took the lock meanwhile", func(t *testing.T) {
		dir := t.TempDir()
		var r restarts
		probe := func(_ context.Context, url string) error {
			if url == "http://a" {
				l, err := state.Dir(dir).TryLock("snapshot create")
				if err != nil {
					t.Fatal(err)
				}
				l.Release()
				return errors.New("connection refused")
			}
			return nil
		}
		rep, err := Run(context.Background(), roundConfig(dir), &r, nil, probe, log, 1)
		if err != nil || rep.Skipped != SkipRanMeanwhile || len(r) != 0 {
			t.Fatalf("round: %+v, %v, restarts %v; want skipped (%s)", rep, err, r, SkipRanMeanwhile)
		}
		// The next round, undisturbed, acts.
		rep, err = Run(context.Background(), roundConfig(dir), &r, nil, probe2(), log, 1)
		if err != nil || rep.Skipped != "" || len(r) != 1 {
			t.Fatalf("next round: %+v, %v, restarts %v", rep, err, r)
		}
	})
}

func probe2() Probe {
	return func(_ context.Context, url string) error {
		if url == "http://a" {
			return errors.New("connection refused")
		}
		return nil
	}
}
