package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// passedSocket is a listening TCP socket the test owns, as systemd owns a
// socket unit's.
func passedSocket(t testing.TB) (*net.TCPListener, *os.File) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return ln.(*net.TCPListener), f
}

// activated starts the real mcp-backend as systemd starts a socket-activated
// service: the socket as fd 3, LISTEN_FDS=1 and LISTEN_PID naming the
// process itself (a shell sets it to its own pid, then execs the backend).
func activated(t testing.TB, sock *os.File, args ...string) (*backend, *bytes.Buffer) {
	t.Helper()
	script := `LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=mcp-backend.socket exec "$0" "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, binary}, args...)...)
	cmd.ExtraFiles = []*os.File{sock}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &backend{cmd: cmd, done: make(chan struct{})}
	go func() { b.err = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-b.done })
	return b, &stderr
}

// backend is a started process whose exit is awaited once.
type backend struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// exited waits up to 30 s for the process to exit on its own.
func (b *backend) exited(t testing.TB, stderr *bytes.Buffer) error {
	t.Helper()
	select {
	case <-b.done:
		return b.err
	case <-time.After(30 * time.Second):
		t.Fatalf("still running:\n%s", stderr)
		return nil
	}
}

func stop(t testing.TB, b *backend, stderr *bytes.Buffer) {
	t.Helper()
	b.cmd.Process.Signal(syscall.SIGTERM)
	if err := b.exited(t, stderr); err != nil {
		t.Fatalf("backend exit: %v\n%s", err, stderr)
	}
}

// TestSocketActivationOutlivesTheProcess: with a passed socket the backend
// serves on it without binding the port itself, and a request sent while no
// backend runs waits in the socket's backlog and is answered by the next
// one: what keeps the tunnels from seeing a closed port during a restart.
func TestSocketActivationOutlivesTheProcess(t *testing.T) {
	ln, sock := passedSocket(t)
	addr := ln.Addr().String()
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q}`, addr))
	first, stderr := activated(t, sock, "serve", "--config", cfg, "--listen", addr)
	base := "http://" + addr
	client := &http.Client{Timeout: 2 * time.Second}
	proctest.Eventually(t, "first backend serves on the passed socket", func() bool {
		r, err := client.Get(base + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})
	// It did not bind the port itself: the log names the passed socket and
	// it never failed with "address already in use" (the test holds it).
	stop(t, first, stderr)
	if strings.Contains(stderr.String(), "address already in use") {
		t.Fatalf("the backend tried to bind the port itself:\n%s", stderr)
	}

	// No backend runs now; the socket is still open. A client connects and
	// sends its request: the kernel accepts it into the backlog.
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("connect while no backend runs: %v (the port must stay open)", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	second, stderr2 := activated(t, sock, "serve", "--config", cfg)
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request sent between the two processes was not answered: %v\n%s", err, stderr2)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	stop(t, second, stderr2)
}

// TestSocketActivationListenMismatch: a passed socket on another address
// than the config's (or --listen's) is a usage error naming both.
func TestSocketActivationListenMismatch(t *testing.T) {
	ln, sock := passedSocket(t)
	other := proctest.FreeAddr(t)
	tests := []struct {
		name   string
		config string
		args   []string
		want   string
	}{
		{"config listen differs", other, nil, other},
		{"--listen differs", ln.Addr().String(), []string{"--listen", other}, other},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q}`, tc.config))
			b, stderr := activated(t, sock, append([]string{"serve", "--config", cfg}, tc.args...)...)
			err := b.exited(t, stderr)
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != exitUsage {
				t.Fatalf("exit %v, want %d\n%s", err, exitUsage, stderr)
			}
			for _, w := range []string{ln.Addr().String(), tc.want} {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("error does not name %s:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestStandbyTakeoverHandoff: two processes hold the same passed socket, as
// the two production slots do during a cutover. The standby serves only its
// own listener, so every call through the shared socket is the old
// process's; after SIGUSR1 to the new one and SIGUSR2 to the old, the old
// finishes what it accepted and parks, and the new one serves alone. Then
// back, as a rollback before the cutover is confirmed does: SIGUSR1 to the
// parked one makes it accept again at once (same process), SIGUSR2 parks
// the new one. Each says its state to systemd's notify socket. Steady
// concurrent load through the shared socket sees no failed call at all.
func TestStandbyTakeoverHandoff(t *testing.T) {
	ln, sock := passedSocket(t)
	addr := ln.Addr().String()
	base := "http://" + addr
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q}`, addr))
	oldStatus := slotStatus(t)
	old, oldErr := activated(t, sock, "serve", "--config", cfg)
	standby := proctest.FreeAddr(t)
	// The standby address comes from the environment, as the slot unit's
	// EnvironmentFile= gives it.
	t.Setenv(StandbyEnv, standby)
	nextStatus := slotStatus(t)
	next, nextErr := activated(t, sock, "serve", "--config", cfg)
	proctest.Eventually(t, "old serves on the shared socket", func() bool { return readyAt(base) })
	proctest.Eventually(t, "standby serves its own listener", func() bool { return readyAt("http://" + standby) })

	var (
		mu    sync.Mutex
		byPID = map[int]int{}
		// sentAt is when each served call was sent, by the pid that ran
		// it: a call answered before a handoff may be counted after it.
		sentAt = map[int][]time.Time{}
		failed []string
	)
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	// Half the clients keep their connection (pinned to the process that
	// accepted it until that one hands off), half connect for each call
	// (each connection a new pick from the shared accept queue).
	keep := &http.Client{Timeout: 30 * time.Second}
	fresh := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				hc := keep
				if i%2 == 1 {
					hc = fresh
				}
				sent := time.Now()
				r := callIn(hc, base, fmt.Sprintf("conversation-%d", i), mcpwire.ToolShellExec, map[string]any{"command": "sleep 0.05; echo $PPID"})
				mu.Lock()
				if !r.OK() {
					failed = append(failed, fmt.Sprintf("%s %s %s", r.Kind, r.Code, r.Detail))
				} else {
					var out struct{ Stdout string }
					_ = json.Unmarshal(r.Structured, &out)
					pid, _ := strconv.Atoi(strings.TrimSpace(out.Stdout))
					byPID[pid]++
					sentAt[pid] = append(sentAt[pid], sent)
				}
				mu.Unlock()
			}
		}(i)
	}
	count := func(pid int) int { mu.Lock(); defer mu.Unlock(); return byPID[pid] }
	sentSince := func(pid int, since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range sentAt[pid] {
			if !at.Before(since) {
				n++
			}
		}
		return n
	}
	oldPID, nextPID := old.cmd.Process.Pid, next.cmd.Process.Pid
	proctest.Eventually(t, "old serves 40 calls", func() bool { return count(oldPID) >= 40 })
	if n := count(nextPID); n != 0 {
		t.Fatalf("the standby served %d calls from the shared socket before its takeover", n)
	}
	next.cmd.Process.Signal(syscall.SIGUSR1)
	proctest.Eventually(t, "the new process serves calls from the shared socket", func() bool { return count(nextPID) >= 20 })
	oldServed := count(oldPID)
	proctest.Eventually(t, "both serve at once", func() bool { return count(oldPID) >= oldServed+20 })
	parks := func(b *backend, status func() string, who string) {
		t.Helper()
		b.cmd.Process.Signal(syscall.SIGUSR2)
		proctest.Eventually(t, who+" parks", func() bool { return status() == mcpwire.SlotParked })
		select {
		case <-b.done:
			t.Fatalf("%s exited after the handoff: %v", who, b.err)
		default:
		}
	}
	// alone: once the other process said it is parked, every call sent
	// is served by serving. (Counting what parked served since then would
	// race with the calls it answered before parking, counted late.)
	alone := func(serving, parked int, who string) {
		t.Helper()
		since := time.Now()
		proctest.Eventually(t, who+" serves alone", func() bool { return sentSince(serving, since) >= 40 })
		if n := sentSince(parked, since); n != 0 {
			t.Fatalf("the parked process served %d calls sent after it parked", n)
		}
	}
	parks(old, oldStatus, "the old process")
	alone(nextPID, oldPID, "the new process")

	// Back before the confirmation: the parked process takes over again.
	old.cmd.Process.Signal(syscall.SIGUSR1)
	proctest.Eventually(t, "the parked process accepts again", func() bool { return oldStatus() == mcpwire.SlotAccepting })
	parks(next, nextStatus, "the new process")
	alone(oldPID, nextPID, "the old process")
	close(stopLoad)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls served: old %d, new %d; failed %d", byPID[oldPID], byPID[nextPID], len(failed))
	if len(failed) > 0 {
		t.Fatalf("%d calls failed across the handoff, first: %s\nold:\n%s\nnew:\n%s", len(failed), failed[0], oldErr, nextErr)
	}
	for pid := range byPID {
		if pid != oldPID && pid != nextPID {
			t.Errorf("a call was served by pid %d, neither process", pid)
		}
	}
	stop(t, next, nextErr)
	stop(t, old, oldErr)
}

// slotStatus makes the next process started send its sd_notify messages
// to a socket of the test's (NOTIFY_SOCKET, as systemd gives) and returns
// the last STATUS= it sent there.
func slotStatus(t testing.TB) func() string {
	t.Helper()
	last, _ := slotStatuses(t)
	return last
}

// slotStatuses is slotStatus that also returns every STATUS= sent so far,
// in order.
func slotStatuses(t testing.TB) (last func() string, all func() []string) {
	t.Helper()
	sock, conn := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	var mu sync.Mutex
	var seen []string
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if v, ok := strings.CutPrefix(line, "STATUS="); ok {
					mu.Lock()
					seen = append(seen, v)
					mu.Unlock()
				}
			}
		}
	}()
	last = func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	all = func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
	return last, all
}

// callIn is one tools/call in a conversation, classified as every client
// of the module classifies answers.
func callIn(hc *http.Client, base, conversation, tool string, args any) mcpclient.Result {
	id := mcpclient.NextID()
	body, _ := mcpclient.CallBodyIn(id, tool, args, conversation)
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
	req.Header = mcpclient.Header("")
	resp, err := hc.Do(req)
	if err != nil {
		return mcpclient.Classify(id, 0, err.Error(), "", nil)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return mcpclient.Classify(id, resp.StatusCode, err.Error(), "", nil)
	}
	return mcpclient.Classify(id, resp.StatusCode, "", resp.Header.Get("Content-Type"), raw)
}

// readyAt reports whether the backend at base answers /readyz 200.
func readyAt(base string) bool {
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/readyz")
	if err == nil {
		r.Body.Close()
	}
	return err == nil && r.StatusCode == 200
}
