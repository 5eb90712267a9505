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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestMemoryUnderHostileLoad is a measured run, not a timed test: it runs
// only when MCP_BACKEND_MEMLOAD=1. Against `mcp-backend serve` with default
// limits it opens 120 connections stalled one byte short of a 6 MiB body
// and sends 60 concurrent complete 6 MiB file.write calls, probing /healthz
// throughout, and reports the backend's peak RSS (VmHWM). It fails if the
// peak reaches 1.5 GiB, a probe fails, or a completed request is not
// answered with a result or a structured refusal. MCP_BACKEND_MEMLOAD_BINARY
// runs another build (e.g. main's) instead.
//
//	MCP_BACKEND_MEMLOAD=1 go test -count=1 -run TestMemoryUnderHostileLoad -v ./cmd/mcp-backend/
func TestMemoryUnderHostileLoad(t *testing.T) {
	if os.Getenv("MCP_BACKEND_MEMLOAD") != "1" {
		t.Skip("measured run: set MCP_BACKEND_MEMLOAD=1")
	}
	bin := binary
	if b := os.Getenv("MCP_BACKEND_MEMLOAD_BINARY"); b != "" {
		bin = b
	}
	const (
		bodySize = 6 << 20
		stalled  = 120
		writers  = 60
	)
	addr := proctest.FreeAddr(t)
	cmd := exec.Command(bin, "serve", "--config", writeConfig(t, fmt.Sprintf(`{"listen":%q}`, addr)))
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	proctest.Eventually(t, "serving", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	// /healthz every 50 ms on a fresh connection each time, as a tunnel's
	// probe would open one.
	var probes, probeFails atomic.Int64
	stopProbe := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		for {
			select {
			case <-stopProbe:
				return
			case <-time.After(50 * time.Millisecond):
			}
			probes.Add(1)
			resp, err := client.Get(base + "/healthz")
			if err != nil || resp.StatusCode != 200 {
				probeFails.Add(1)
				continue
			}
			resp.Body.Close()
		}
	}()

	dir := t.TempDir()
	body := func(id int, path string) []byte {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"file.write","arguments":{"path":%q,"content":"`, id, path)
		tail := `"}}}`
		return []byte(head + strings.Repeat("x", bodySize-len(head)-len(tail)) + tail)
	}
	// The stalled connections: everything but the last byte.
	var stalledAnswered atomic.Int64
	var conns []net.Conn
	for i := range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		b := body(1000+i, filepath.Join(dir, "stalled"))
		go func() {
			fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", len(b))
			c.Write(b[:len(b)-1])
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				stalledAnswered.Add(1)
			}
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	// Each writer records its first answer, then retries a refusal as a
	// client would (every 250 ms) until its write is done, so the run also
	// measures the memory of the writes actually served.
	outcomes, finals := map[string]int{}, map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := body(i+1, filepath.Join(dir, "w"+strconv.Itoa(i)))
			out := writeOnce(base, b)
			first := out
			for tries := 0; out == "OVERLOADED" && tries < 240; tries++ {
				time.Sleep(250 * time.Millisecond)
				out = writeOnce(base, b)
			}
			mu.Lock()
			outcomes[first]++
			finals[out]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	proctest.Eventually(t, "every stalled connection answered", func() bool { return stalledAnswered.Load() == stalled })
	hwm := vmHWM(t, cmd.Process.Pid)
	close(stopProbe)
	<-probeDone

	t.Logf("backend %s: %d stalled connections of %d MiB bodies + %d concurrent %d MiB file.write", bin, stalled, bodySize>>20, writers, bodySize>>20)
	t.Logf("peak RSS (VmHWM) %.0f MiB; first answers %v; after retrying refusals %v (all done in %s); /healthz %d probes, %d failed; stalled connections answered %d",
		float64(hwm)/(1<<20), outcomes, finals, elapsed.Round(time.Millisecond), probes.Load(), probeFails.Load(), stalledAnswered.Load())
	if hwm >= 3<<29 {
		t.Errorf("peak RSS %d bytes, want under 1.5 GiB", hwm)
	}
	if probeFails.Load() != 0 {
		t.Errorf("%d /healthz probes failed", probeFails.Load())
	}
	for out, n := range outcomes {
		if out != "ok" && out != "OVERLOADED" {
			t.Errorf("%d writes ended %q: want ok or a structured refusal", n, out)
		}
	}
	for out, n := range finals {
		if out != "ok" && out != "OVERLOADED" {
			t.Errorf("%d writes ended %q: want ok or a structured refusal", n, out)
		}
	}
}

// writeOnce sends one complete body and classifies the answer.
func writeOnce(base string, body []byte) string {
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return "transport error"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
		Error *struct{ Code int } `json:"error"`
	}
	if json.Unmarshal(b, &r) != nil {
		return fmt.Sprintf("HTTP %d, not JSON-RPC", resp.StatusCode)
	}
	switch {
	case r.Error != nil:
		return fmt.Sprintf("HTTP %d, JSON-RPC error %d", resp.StatusCode, r.Error.Code)
	case r.Result == nil:
		return "no result"
	case !r.Result.IsError:
		return "ok"
	}
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	if len(r.Result.Content) > 0 && json.Unmarshal([]byte(r.Result.Content[0].Text), &env) == nil && env.Error.Code != "" {
		return env.Error.Code
	}
	return "unstructured tool error"
}

func vmHWM(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
