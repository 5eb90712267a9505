package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/config"
)

// TestShellCeilingOverRealHTTP: 200 concurrent shell.exec calls through the
// real handler on a real listener: exactly maxShell run at once (the ceiling
// is reached and never exceeded), maxQueue wait, the rest are OVERLOADED tool
// results inside HTTP 200, and afterwards everything balances.
func TestShellCeilingOverRealHTTP(t *testing.T) {
	b := startBackend(t, nil) // defaults: 48/8/8/64
	g := newGate(t)
	const n = 200
	codes := make(chan string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body, err := callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": g.command()})
			if err != nil || status != http.StatusOK {
				codes <- fmt.Sprintf("HTTP %d %v", status, err)
				return
			}
			codes <- parseReply(t, body).errorCode()
		}()
	}
	proctest.Eventually(t, "8 running, 64 queued, 128 rejected", func() bool {
		s := b.metrics(t)
		return s.Active.Shell == 8 && s.Queued.Total == 64 && s.Counters.Rejected == n-8-64
	})
	// While saturated: /readyz is 503, /healthz 200, control works.
	if code := getJSON(t, b.url+"/readyz", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while the queue is full, want 503", code)
	}
	var h map[string]string
	if code := getJSON(t, b.url+"/healthz", &h); code != 200 || h["status"] != "ok" {
		t.Fatalf("/healthz = %d %v", code, h)
	}
	g.open(t)
	wg.Wait()
	close(codes)
	count := map[string]int{}
	for c := range codes {
		count[c]++
	}
	if count[""] != 8+64 || count["OVERLOADED"] != n-8-64 || len(count) != 2 {
		t.Fatalf("outcomes %v, want 72 ok and 128 OVERLOADED", count)
	}
	s := b.metrics(t)
	if s.Peak.Shell != 8 || s.Peak.Queued != 64 || s.Peak.Active > 48 {
		t.Fatalf("peaks %+v", s.Peak)
	}
	assertBalanced(t, b, n)
}

// TestControlUsesReserveWhileSaturated: all 40 non-control slots busy and the
// queue full, control calls still succeed; surplus normal calls get
// OVERLOADED.
func TestControlUsesReserveWhileSaturated(t *testing.T) {
	b := startBackend(t, func(c *config.Config) {
		c.Concurrency.MaxShell = 40
		// The 64 queued calls must still be queued when the gate opens:
		// on a loaded machine the default 30 s wait could lapse first and
		// turn queued calls into timeouts (the bound under test is the
		// queue's length, not its wait).
		c.Concurrency.QueueWaitMs = 600_000
	})
	g := newGate(t)
	const n = 140
	var wg sync.WaitGroup
	results := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, body, err := callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": g.command()})
			if err != nil {
				results <- err.Error()
				return
			}
			results <- parseReply(t, body).errorCode()
		}()
	}
	proctest.Eventually(t, "40 non-control running and the queue full", func() bool {
		s := b.metrics(t)
		return s.Active.NonControl == 40 && s.Queued.Total == 64
	})
	// Control calls, several at once, over the go-sdk client too.
	cs := newSDKClient(t, b.url)
	var cwg sync.WaitGroup
	for i := 0; i < 8; i++ {
		cwg.Add(1)
		go func(i int) {
			defer cwg.Done()
			tool := []string{"system.info", "process.list"}[i%2]
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
			if err != nil {
				t.Errorf("%s: %v", tool, err)
				return
			}
			if res.IsError {
				t.Errorf("%s failed while normal work is saturated: %s", tool, textOf(res))
			}
		}(i)
	}
	cwg.Wait()
	// A normal call now is refused at once, over raw HTTP and to the
	// go-sdk client alike: a tool result, not a transport error.
	_, body, err := callRaw(context.Background(), b.url, "file.list", map[string]any{"path": "/"})
	if err != nil {
		t.Fatal(err)
	}
	if code := parseReply(t, body).errorCode(); code != "OVERLOADED" {
		t.Fatalf("file.list while saturated: %q, want OVERLOADED", code)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "file.read", Arguments: map[string]any{"path": "/etc/hostname"}})
	if err != nil {
		t.Fatalf("OVERLOADED must be a tool result, got transport error %v", err)
	}
	if !res.IsError || !strings.Contains(textOf(res), `"code":"OVERLOADED"`) {
		t.Fatalf("file.read while saturated: %+v", res)
	}
	g.open(t)
	wg.Wait()
	close(results)
	count := map[string]int{}
	for r := range results {
		count[r]++
	}
	if count[""] != 104 || count["OVERLOADED"] != n-104 {
		t.Fatalf("outcomes %v", count)
	}
	assertBalanced(t, b, n+8+2)
}

func assertBalanced(t testing.TB, b *backend, calls int) {
	t.Helper()
	var s = b.metrics(t)
	proctest.Eventually(t, "idle", func() bool {
		s = b.metrics(t)
		return s.Active.Total == 0 && s.Queued.Total == 0
	})
	c := s.Counters
	if c.Accepted != c.Completed {
		t.Fatalf("accepted %d != completed %d", c.Accepted, c.Completed)
	}
	if got := c.Accepted + c.Rejected + c.TimedOut + c.Cancelled; got != int64(calls) {
		t.Fatalf("counters %+v add up to %d, want %d calls", c, got, calls)
	}
	if code := getJSON(t, b.url+"/readyz", nil); code != 200 {
		t.Fatalf("/readyz = %d when idle", code)
	}
}

func newSDKClient(t testing.TB, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func textOf(r *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// TestDisconnectWhileQueued: a real HTTP client that goes away while its
// call waits leaves the queue as cancelled, without taking a slot.
func TestDisconnectWhileQueued(t *testing.T) {
	b := startBackend(t, func(c *config.Config) { c.Concurrency.MaxShell = 1 })
	g := newGate(t)
	done := b.holdShell(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := callRaw(ctx, b.url, "shell.exec", map[string]any{"command": "echo never"})
		errc <- err
	}()
	proctest.Eventually(t, "the second call queued", func() bool { return b.metrics(t).Queued.Total == 1 })
	before := b.metrics(t)
	cancel()
	<-errc
	proctest.Eventually(t, "the queued call cancelled", func() bool { return b.metrics(t).Counters.Cancelled == 1 })
	after := b.metrics(t)
	if after.Queued.Total != 0 || after.Counters.Accepted != before.Counters.Accepted || after.Active.Shell != 1 {
		t.Fatalf("before %+v after %+v", before, after)
	}
	g.open(t)
	<-done
	assertBalanced(t, b, 2)
}

// TestDisconnectKillsRunningGroup: a client that goes away while its
// shell.exec runs takes the whole process group with it.
func TestDisconnectKillsRunningGroup(t *testing.T) {
	b := startBackend(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := fmt.Sprintf("echo $$ >> %[1]s; sleep 300 & echo $! >> %[1]s; (sleep 300 & echo $! >> %[1]s; wait) & wait", pidFile)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := callRaw(ctx, b.url, "shell.exec", map[string]any{"command": cmd, "timeoutMs": 120000})
		errc <- err
	}()
	pids := proctest.ReadPids(t, pidFile, 3)
	for _, p := range pids {
		if !proctest.Alive(p) {
			t.Fatalf("pid %d not running before the disconnect", p)
		}
	}
	cancel()
	<-errc
	proctest.WaitDead(t, pids...)
	assertBalanced(t, b, 1)
}

// TestResponseBudgetWithHostileOutput: NUL bytes encode to six bytes each;
// 4 MiB of them must still give a response within 6 MiB.
func TestResponseBudgetWithHostileOutput(t *testing.T) {
	b := startBackend(t, nil)
	tests := []struct{ name, cmd string }{
		{"nul bytes", "head -c 4194304 /dev/zero"},
		{"control bytes on both streams", `head -c 2097152 /dev/zero | tr '\0' '\001'; head -c 2097152 /dev/zero | tr '\0' '\033' >&2`},
		{"random binary", "head -c 4194304 /dev/urandom"},
		{"flood past the output limit", "yes '\"\\\\\"'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": tc.cmd})
			if err != nil || status != 200 {
				t.Fatalf("status %d err %v", status, err)
			}
			if len(body) > 6<<20 {
				t.Fatalf("response is %d bytes, over the 6 MiB budget", len(body))
			}
			r := parseReply(t, body)
			if r.Result == nil {
				t.Fatalf("no result: %.200s", body)
			}
			var out map[string]any
			if err := json.Unmarshal(r.Result.StructuredContent, &out); err != nil {
				t.Fatal(err)
			}
			if out["outputLimited"] != true {
				t.Fatalf("large output not flagged: keys %v", keys(out))
			}
		})
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestHTTPEdges(t *testing.T) {
	b := startBackend(t, func(c *config.Config) {
		c.Limits.OutputBytes = 1 << 20
		c.Limits.ResponseBytes = 2 << 20
		c.AllowedHosts = []string{"mcp.example.com"}
		c.AllowedOrigins = []string{"https://claude.ai"}
	})
	t.Run("oversized body refused", func(t *testing.T) {
		big := bytes.Repeat([]byte("a"), 3<<20)
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file.write","arguments":{"path":"/tmp/x","content":"` + string(big) + `"}}}`)
		status, _, err := post(context.Background(), b.url+"/mcp", body)
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", status)
		}
		if code := getJSON(t, b.url+"/healthz", nil); code != 200 {
			t.Fatalf("healthz %d after oversized body", code)
		}
	})
	t.Run("malformed JSON-RPC answered with a JSON-RPC error", func(t *testing.T) {
		status, body, err := post(context.Background(), b.url+"/mcp", []byte(`{"jsonrpc":"2.0","id":1,"method":`))
		if err != nil {
			t.Fatal(err)
		}
		var r toolReply
		if json.Unmarshal(body, &r) != nil || r.Error == nil {
			t.Fatalf("status %d body %.200s: want a JSON-RPC error", status, body)
		}
	})
	t.Run("batch refused with a JSON-RPC error", func(t *testing.T) {
		batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`
		status, body, err := post(context.Background(), b.url+"/mcp", []byte(batch))
		if err != nil {
			t.Fatal(err)
		}
		var r toolReply
		if json.Unmarshal(body, &r) != nil || r.Error == nil || r.Error.Code != -32600 || status != http.StatusBadRequest {
			t.Fatalf("status %d body %.200s", status, body)
		}
	})
	t.Run("huge id refused", func(t *testing.T) {
		id := `"` + strings.Repeat("x", 1000) + `"`
		status, body, err := post(context.Background(), b.url+"/mcp", []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusBadRequest || len(body) > 1024 {
			t.Fatalf("status %d, %d bytes", status, len(body))
		}
	})
	// Through a public name /metrics needs the operator's token (401 once
	// Host and Origin passed; this backend has none): 403 is the Host or
	// Origin check.
	hostTests := []struct {
		name, host, origin string
		want               int
	}{
		{"loopback host", "127.0.0.1", "", 200},
		{"localhost with port", "localhost:3210", "", 200},
		{"allowed public host (tunnel)", "mcp.example.com", "", 401},
		{"unknown host (rebinding)", "evil.example.net", "", 403},
		{"allowed host, foreign origin", "127.0.0.1", "https://evil.example.net", 403},
		{"allowed origin", "mcp.example.com", "https://mcp.example.com", 401},
		{"loopback origin (local Inspector UI)", "127.0.0.1", "http://localhost:6274", 200},
		{"origin in allowedOrigins (hosted client)", "mcp.example.com", "https://claude.ai", 401},
		{"allowedOrigins is exact: other scheme", "mcp.example.com", "http://claude.ai", 403},
		{"allowedOrigins is exact: subdomain", "mcp.example.com", "https://x.claude.ai", 403},
	}
	for _, tc := range hostTests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, b.url+"/metrics", nil)
			req.Host = tc.host
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if got := statusOf(t, req); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("browser client of an allowed origin: preflight, then a call it can read", func(t *testing.T) {
		pre, _ := http.NewRequest(http.MethodOptions, b.url+"/mcp", nil)
		pre.Header.Set("Origin", "https://claude.ai")
		pre.Header.Set("Access-Control-Request-Method", "POST")
		pre.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-session-id")
		resp, err := http.DefaultClient.Do(pre)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://claude.ai" ||
			!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") {
			t.Fatalf("preflight: status %d headers %v", resp.StatusCode, resp.Header)
		}
		req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`))
		req.Header.Set("Origin", "https://claude.ai")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://claude.ai" {
			t.Fatalf("call: status %d headers %v", resp.StatusCode, resp.Header)
		}
	})
	t.Run("prometheus text on Accept text/plain", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, b.url+"/metrics", nil)
		req.Header.Set("Accept", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `mcp_admission_limit{limit="maxShell"} 8`) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("not prometheus text: %.300s", body)
		}
	})
}

func TestBearerToken(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(tokFile, []byte("s3cret-token-0123456789\n"), 0o600)
	b := startBackend(t, func(c *config.Config) { c.Auth.BearerTokenFile = tokFile })
	tests := []struct {
		name, auth string
		want       int
	}{
		{"none", "", 401},
		{"wrong", "Bearer nope", 401},
		{"right", "Bearer s3cret-token-0123456789", 200},
		{"scheme in any case", "bearer s3cret-token-0123456789", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if got := statusOf(t, req); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	if code := getJSON(t, b.url+"/metrics", nil); code != 200 {
		t.Fatalf("/metrics = %d: counters need no token", code)
	}
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, []byte("s3cret-token-0123456789"), 0o644)
	cfg := config.Default()
	cfg.Auth.BearerTokenFile = loose
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "group/world") {
		t.Fatalf("world-readable token accepted: %v", err)
	}
}

// TestQueueWaitTimeoutOverHTTP: a call that waits out queueWaitMs gets an
// OVERLOADED tool result through the middleware (not the early shed), and is
// counted timedOut.
func TestQueueWaitTimeoutOverHTTP(t *testing.T) {
	b := startBackend(t, func(c *config.Config) {
		c.Concurrency.MaxShell = 1
		c.Concurrency.QueueWaitMs = 200
	})
	g := newGate(t)
	done := b.holdShell(t, g)
	cs := newSDKClient(t, b.url)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{"command": "echo late"}})
	if err != nil {
		t.Fatalf("OVERLOADED must be a tool result, got %v", err)
	}
	if !res.IsError || !strings.Contains(textOf(res), `"code":"OVERLOADED"`) || !strings.Contains(textOf(res), "queue wait") {
		t.Fatalf("got %s", textOf(res))
	}
	if s := b.metrics(t); s.Counters.TimedOut != 1 || s.Counters.Rejected != 0 {
		t.Fatalf("counters %+v", s.Counters)
	}
	g.open(t)
	<-done
	assertBalanced(t, b, 2)
}

// TestCloseCancelsCallsInFlight: shutdown takes queued calls out of the
// queue and kills running commands, whatever the transport.
func TestCloseCancelsCallsInFlight(t *testing.T) {
	b := startBackend(t, func(c *config.Config) { c.Concurrency.MaxShell = 1 })
	pidFile := filepath.Join(t.TempDir(), "pids")
	results := make(chan string, 2)
	go func() {
		_, body, _ := callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": fmt.Sprintf("echo $$ >> %s; sleep 300", pidFile)})
		results <- string(body)
	}()
	pids := proctest.ReadPids(t, pidFile, 1)
	go func() {
		_, body, _ := callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": "echo queued"})
		results <- string(body)
	}()
	proctest.Eventually(t, "second call queued", func() bool { return b.metrics(t).Queued.Total == 1 })
	b.srv.Close()
	for i := 0; i < 2; i++ {
		if r := <-results; !strings.Contains(r, "CANCELLED") && !strings.Contains(r, "UNAVAILABLE") {
			t.Fatalf("call %d after Close: %.300s", i, r)
		}
	}
	proctest.WaitDead(t, pids...)
	if s := b.metrics(t); s.Active.Total != 0 || s.Queued.Total != 0 || s.Counters.Cancelled != 1 {
		t.Fatalf("after Close: %+v", s)
	}
}

// TestNewRefusedClosesItsAuditLog: a New that fails after the audit log
// is open (here jobs.mode systemd with nowhere to keep the jobs) closes
// it: nothing will serve, so its goroutines and file must not stay.
func TestNewRefusedClosesItsAuditLog(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "")
	cfg := config.Default()
	cfg.Audit.Sink, cfg.Audit.File = config.AuditFile, filepath.Join(t.TempDir(), "audit.jsonl")
	cfg.Jobs.Mode = config.JobsSystemd
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if srv, err := New(cfg, nil); err == nil {
		srv.Close()
		t.Fatal("jobs.mode systemd without a state directory accepted")
	}
	// No test of this package runs in parallel, and each closes the logs
	// it opened, so any audit goroutine alive now is this New's.
	if leaked := leakedAudit(time.Second); len(leaked) > 0 {
		t.Fatalf("%d audit log goroutines outlived the refused New:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}
