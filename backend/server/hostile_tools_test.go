package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestBlockingFilesReleaseTheirSlots: file.read of /proc/kmsg (a regular
// file whose read sleeps in the kernel until the kernel logs something) used
// to hold its slot whatever the client did: with two normal slots, two such
// calls left the server refusing all normal work. Now each call answers by
// itself (what kmsg has, or UNAVAILABLE) and its slot is free afterwards; a
// symlink to a FIFO with no writer is refused at once. (Reads that stall
// where O_NONBLOCK does not reach are left on timeout or cancellation: the
// tools package tests that against a stalled FUSE mount.) Reading /proc/kmsg consumes unread kernel log lines, as
// any reader of it does.
func TestBlockingFilesReleaseTheirSlots(t *testing.T) {
	if f, err := os.Open("/proc/kmsg"); err != nil {
		t.Fatalf("this test needs a readable /proc/kmsg (root): %v", err)
	} else {
		f.Close()
	}
	b := startBackend(t, func(c *config.Config) {
		c.Files.Deny = nil // files.deny refuses /proc/kmsg by default; this test needs its blocking read
		c.Concurrency.MaxActive = 3
		c.Concurrency.ReservedControl = 1
		c.Concurrency.MaxShell = 1
	})
	// Nothing unread, so a read that waits for the kernel log would wait.
	drainKmsg(t)
	t.Cleanup(func() {
		if t.Failed() {
			// A regression leaves reads stuck in the kernel, and the server's
			// Close would wait for them: log enough lines to let them go.
			releaseKmsgReaders()
		}
	})
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("still served"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path string
		want map[string]bool // acceptable outcomes ("" is success)
	}{
		{"/proc/kmsg", map[string]bool{"": true, "UNAVAILABLE": true}},
		{link, map[string]bool{"INVALID_ARGUMENT": true}},
	}
	// More calls than there are normal slots: a stranded slot shows.
	for range 3 {
		for _, tc := range tests {
			ctx, cancel := context.WithCancel(context.Background())
			type answer struct {
				body []byte
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				_, body, err := callRaw(ctx, b.url, "file.read", map[string]any{"path": tc.path, "length": 64})
				done <- answer{body, err}
			}()
			var got *answer
			proctest.Eventually(t, "file.read of "+tc.path+" to answer", func() bool {
				select {
				case a := <-done:
					got = &a
					return true
				default:
					return false
				}
			})
			cancel()
			if got.err != nil {
				t.Fatalf("file.read of %s: %v", tc.path, got.err)
			}
			if code := parseReply(t, got.body).errorCode(); !tc.want[code] {
				t.Fatalf("file.read of %s: outcome %q, want one of %v", tc.path, code, tc.want)
			}
			proctest.Eventually(t, "no slot held", func() bool { return b.metrics(t).Active.Total == 0 })
		}
	}
	_, body, err := callRaw(context.Background(), b.url, "file.read", map[string]any{"path": plain})
	if err != nil {
		t.Fatal(err)
	}
	if code := parseReply(t, body).errorCode(); code != "" {
		t.Fatalf("normal work after the blocking reads: %s", code)
	}
}

// drainKmsg reads /proc/kmsg until it has nothing unread.
func drainKmsg(t testing.TB) {
	t.Helper()
	fd, err := syscall.Open("/proc/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 64<<10)
	for {
		if n, err := syscall.Read(fd, buf); err != nil || n == 0 {
			return
		}
	}
}

// releaseKmsgReaders writes lines to the kernel log, which wakes readers
// blocked in /proc/kmsg.
func releaseKmsgReaders() {
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	for range 16 {
		f.WriteString("mcp-backend server test: waking blocked /proc/kmsg readers after a failure\n")
	}
}

// TestProcessListControlBytesOverHTTP: many command lines of control bytes
// used to get OUTPUT_LIMIT and no data through the real server; now the
// list comes back cut to the response budget and flagged.
func TestProcessListControlBytesOverHTTP(t *testing.T) {
	b := startBackend(t, func(c *config.Config) {
		c.Limits.OutputBytes = 64 << 10
		c.Limits.ResponseBytes = 192 << 10
	})
	tag := fmt.Sprintf("ctlhttp%d", os.Getpid())
	const procs = 40 // ~1 MB of encoded command lines
	for range procs {
		cmd := exec.Command("sleep", "3005")
		cmd.Args[0] = strings.Repeat("\x01\x1b", 2000) + tag
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	status, body, err := callRaw(context.Background(), b.url, "process.list", map[string]any{"name": tag, "limit": 5000})
	if err != nil || status != 200 {
		t.Fatalf("status %d: %v", status, err)
	}
	if len(body) > 192<<10 {
		t.Fatalf("response of %d bytes over the budget", len(body))
	}
	r := parseReply(t, body)
	if code := r.errorCode(); code != "" {
		t.Fatalf("process.list answered %s", code)
	}
	var res struct {
		Processes []struct{ Command string } `json:"processes"`
		Total     int                        `json:"total"`
		Truncated bool                       `json:"truncated"`
	}
	if err := json.Unmarshal(r.Result.StructuredContent, &res); err != nil {
		t.Fatal(err)
	}
	if res.Total != procs || !res.Truncated || len(res.Processes) == 0 {
		t.Fatalf("total %d, %d processes, truncated %v", res.Total, len(res.Processes), res.Truncated)
	}
}
