package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestWatchdogSurvivesConnectionFlood: the real process under a systemd
// watchdog interval, its connection cap (and reserve) kept full of silent
// TCP connections that are reopened as soon as they are closed. WATCHDOG=1
// keeps coming at its interval (a merely attacked backend is never
// restarted by systemd) and /healthz is still answered through the public
// listener. The gap between two WATCHDOG=1 is the contract systemd enforces
// (WatchdogSec), so it is asserted against the interval itself.
func TestWatchdogSurvivesConnectionFlood(t *testing.T) {
	const interval = 3 * time.Second
	sock, conn := notifySocket(t)
	port := proctest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q}`, addr))
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, fmt.Sprintf("WATCHDOG_USEC=%d", interval.Microseconds()))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()

	pings := make(chan time.Time, 1024)
	ready := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				switch line {
				case "READY=1":
					ready <- time.Now()
				case "WATCHDOG=1":
					pings <- time.Now()
				}
			}
		}
	}()
	// The flood starts at READY=1, before the first self-probe: the probe
	// has no connection of its own yet.
	var readyAt time.Time
	select {
	case readyAt = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("no READY=1")
	}
	// The flood: more silent sockets than the cap and its reserve (448 +
	// 16 by default), each reopened when the server closes it.
	const sockets, flood = 600, 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), flood)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened := 0
	for range sockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for ctx.Err() == nil {
				d := net.Dialer{Timeout: time.Second}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				opened++
				mu.Unlock()
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, _ = c.Read(buf) // until the server closes it
				stop()
				c.Close()
			}
		}()
	}
	// /healthz through the public listener, in the middle of the flood.
	time.Sleep(flood / 2)
	client := &http.Client{Timeout: 2 * flood}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz during the flood: %s", resp.Status)
	}
	<-ctx.Done()
	wg.Wait()
	close(pings)
	times := []time.Time{readyAt}
	for p := range pings {
		times = append(times, p)
	}
	if len(times) < 4 {
		t.Fatalf("only %d WATCHDOG=1 in %s with a %s interval", len(times), flood, interval)
	}
	var worst time.Duration
	for i := 1; i < len(times); i++ {
		worst = max(worst, times[i].Sub(times[i-1]))
	}
	t.Logf("%d sockets opened during the flood; %d WATCHDOG=1, longest gap %s (interval %s)", opened, len(times), worst, interval)
	if worst >= interval {
		t.Fatalf("WATCHDOG=1 gap %s >= WatchdogSec %s: systemd would restart the backend", worst, interval)
	}
	if opened <= sockets {
		t.Fatalf("no silent socket was closed by the server (%d opened): the cap's places were held", opened)
	}
}
