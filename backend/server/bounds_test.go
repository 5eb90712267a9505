package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// countingWriter is a log sink that keeps its lines, for bounds on them.
type countingWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// lines returns the lines written since byte offset from, and the length
// now.
func (w *countingWriter) lines(from int) ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf.Bytes()
	return strings.Split(strings.TrimSuffix(string(b[min(from, len(b)):]), "\n"), "\n"), len(b)
}

// serveLogged is a real Server run by Serve on a real listener (the
// production HTTP server: its header limit, its connection cap) with its
// log written to logs.
func serveLogged(t testing.TB, mutate func(*config.Config), logs io.Writer) *served {
	t.Helper()
	cfg := config.Default()
	mutate(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{backend: backend{srv: srv, url: "http://" + ln.Addr().String()}, addr: ln.Addr().String(), stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// floodResult is what the clients of a flood saw.
type floodResult struct {
	status   map[int]int
	maxBytes int // the longest answer body
	bodies   map[int]string
}

// flood sends n requests from 32 clients; req(i) builds the i-th.
func flood(t testing.TB, n int, req func(i int) *http.Request) floodResult {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	res := floodResult{status: map[int]int{}, bodies: map[int]string{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				resp, err := client.Do(req(i))
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				res.status[resp.StatusCode]++
				res.maxBytes = max(res.maxBytes, len(b))
				res.bodies[resp.StatusCode] = string(b)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}

// toolCallRequest is a POST /mcp tools/call of tool with Host host and
// bearer token (none when "").
func toolCallRequest(url, host, token, tool string) *http.Request {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": map[string]any{}}})
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", bytes.NewReader(body))
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// TestHostileNamesKeepTheAuditTrail floods a real server, as an attacker
// without a token would and as a caller with one might, with every shape of
// name it must bound: junk and huge Host headers, 401s through ten
// thousand distinct (valid) Hosts, 1 MB tool names, /metrics through the
// tunnel without the token. The operator's call from before the floods is
// still in the audit file, every refusal is counted exactly in a handful
// of records, the log grew by a few aggregated lines a second, and no
// answer, record value or log line holds more than its bound.
func TestHostileNamesKeepTheAuditTrail(t *testing.T) {
	const (
		public        = "mcp.tunnel.example"
		responseBytes = 131072
		fieldBytes    = 4096 // no audit value longer
		lineBytes     = 2048 // no log line longer
		keysPerSecond = 12   // distinct refusal keys the floods can make per window
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(auditToken), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &countingWriter{}
	s := serveLogged(t, func(c *config.Config) {
		c.Auth.BearerTokenFile = tok
		c.Audit.Sink, c.Audit.File = config.AuditFile, path
		// Small enough that the old per-Host records rotated the earlier
		// call away twice over; the aggregates fill a fraction of it.
		c.Audit.FileMaxBytes, c.Audit.FileKeep = 256<<10, 1
		c.AllowedHosts = []string{public}
		c.Limits.OutputBytes, c.Limits.ResponseBytes = 64<<10, responseBytes
	}, logs)

	// The operator's call, before any flood.
	if status, code := auditCall(t, context.Background(), s.url, "127.0.0.1", auditToken, "system.info", map[string]any{}); status != 200 || code != "" {
		t.Fatalf("operator's call: %d %q", status, code)
	}
	var callID string
	proctest.Eventually(t, "the operator's call recorded", func() bool {
		for _, r := range auditRecords(t, path) {
			if r[audit.FieldMessageID] == audit.MsgCallStart && r[audit.FieldTool] == "system.info" {
				callID = r[audit.FieldCallID]
				return true
			}
		}
		return false
	})
	_, logFrom := logs.lines(0)
	began := time.Now()

	// 1. Junk and huge Hosts: 400, recorded nowhere.
	junk := []string{"127.0.0.1:%d", "127.0.0.1:x%d", "localhost:-%d", public + ":%d0000", "127.0.0.1:%d:1", "[::1]:%d99999"}
	huge := []string{"127.0.0.1:" + strings.Repeat("9", 60<<10), public + ":" + strings.Repeat("7", 60<<10), strings.Repeat("a", 60<<10)}
	const nJunk = 1200
	res := flood(t, nJunk+len(huge), func(i int) *http.Request {
		host := ""
		switch {
		case i < len(huge):
			host = huge[i]
		default:
			host = fmt.Sprintf(junk[i%len(junk)], 65536+i)
		}
		return toolCallRequest(s.url, host, "", "system.info")
	})
	if res.status[http.StatusBadRequest] != nJunk+len(huge) || res.maxBytes > 1024 {
		t.Errorf("junk Hosts: statuses %v, longest answer %d bytes; want every one 400 within 1 KiB", res.status, res.maxBytes)
	}

	// 2. Ten thousand 401s, each through a Host of its own (ports and
	// loopback addresses are many; every one is valid).
	const n401 = 10000
	res = flood(t, n401, func(i int) *http.Request {
		var host string
		switch i % 3 {
		case 0:
			host = fmt.Sprintf("127.0.0.1:%d", 1+i%65535)
		case 1:
			host = fmt.Sprintf("127.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 1+i%65535)
		default:
			host = fmt.Sprintf("%s:%d", public, 1+i%65535)
		}
		token := ""
		if i%2 == 1 {
			token = fmt.Sprintf("forged-token-%d-0123456789abcdef", i)
		}
		return toolCallRequest(s.url, host, token, "system.info")
	})
	if res.status[http.StatusUnauthorized] != n401 || res.maxBytes > 1024 {
		t.Errorf("anonymous flood: statuses %v, longest answer %d bytes; want %d 401 within 1 KiB", res.status, res.maxBytes, n401)
	}

	// 3. Tool names of 1 MB, with the operator's token: refused before
	// admission, the name bounded in the answer.
	bigName := strings.Repeat("n", 1<<20)
	res = flood(t, 3, func(int) *http.Request { return toolCallRequest(s.url, "127.0.0.1", auditToken, bigName) })
	if res.status[http.StatusOK] != 3 || res.maxBytes > 1024 || res.maxBytes > responseBytes {
		t.Errorf("1 MB tool names: statuses %v, longest answer %d bytes; want 200 within 1 KiB (limits.responseBytes %d)", res.status, res.maxBytes, responseBytes)
	}
	var rpc toolReply
	if err := json.Unmarshal([]byte(res.bodies[http.StatusOK]), &rpc); err != nil || rpc.Error == nil || rpc.Error.Code != -32602 ||
		!strings.HasPrefix(rpc.Error.Message, `unknown tool "nnnn`) || !strings.Contains(rpc.Error.Message, "(1048576 bytes)") {
		t.Errorf("1 MB tool name answered %.300s; want the invalid-params error quoting the name bounded, with its length", res.bodies[http.StatusOK])
	}

	// 4. /metrics through the tunnel without the token.
	const nMetrics = 300
	res = flood(t, nMetrics, func(i int) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/metrics", nil)
		req.Host = fmt.Sprintf("%s:%d", public, 1+i)
		return req
	})
	if res.status[http.StatusUnauthorized] != nMetrics {
		t.Errorf("/metrics through the tunnel without the token: %v, want %d 401", res.status, nMetrics)
	}
	seconds := int(time.Since(began)/time.Second) + 3 // + the windows open at either end

	// The audit trail: the earlier call survived; each refusal counted
	// exactly, in a few records a second; nothing unbounded.
	var m struct {
		Audit struct{ Dropped int64 } `json:"audit"`
	}
	if code := getJSON(t, s.url+"/metrics", &m); code != 200 || m.Audit.Dropped != 0 {
		t.Errorf("/metrics from loopback: %d, audit.dropped %d; want 200, 0", code, m.Audit.Dropped)
	}
	if err := s.srv.Audit().Close(5 * time.Second); err != nil { // flushes the aggregates
		t.Fatal(err)
	}
	recs := append(auditRecords(t, path+".1"), auditRecords(t, path)...)
	found, refusedRecords, counted401 := false, 0, 0
	for _, r := range recs {
		if r[audit.FieldCallID] == callID && r[audit.FieldMessageID] == audit.MsgCallStart {
			found = true
		}
		if r[audit.FieldMessageID] == audit.MsgRefused {
			refusedRecords++
			if r[audit.FieldStatus] == "401" {
				n, _ := strconv.Atoi(r[audit.FieldCount])
				counted401 += n
			}
		}
		if r[audit.FieldMessageID] == audit.MsgCallStart && r[audit.FieldCallID] != callID {
			t.Errorf("a call other than the operator's was admitted: %.300v", r)
		}
		for k, v := range r {
			if len(v) > fieldBytes {
				t.Errorf("audit %s holds %d bytes", k, len(v))
			}
		}
	}
	if !found {
		t.Errorf("the operator's call %s is gone from the audit trail (%d records kept)", callID, len(recs))
	}
	if counted401 != n401 {
		t.Errorf("401s in the audit's refusal records: %d, want %d", counted401, n401)
	}
	if refusedRecords > keysPerSecond*seconds {
		t.Errorf("%d refusal records over about %d s; want at most %d a second", refusedRecords, seconds, keysPerSecond)
	}
	// The log: aggregated refusal lines with exact counts, no line per
	// request.
	var logged401, loggedUnknown int
	proctest.Eventually(t, "every refusal counted in the log", func() bool {
		lines, _ := logs.lines(logFrom)
		logged401, loggedUnknown = 0, 0
		for _, l := range lines {
			var m struct {
				Msg     string `json:"msg"`
				Count   int    `json:"count"`
				Status  int    `json:"status"`
				Outcome string `json:"outcome"`
			}
			if json.Unmarshal([]byte(l), &m) != nil || !strings.HasSuffix(m.Msg, " refused") {
				continue
			}
			switch {
			case m.Status == http.StatusUnauthorized:
				logged401 += m.Count
			case m.Outcome == "unknown-tool":
				loggedUnknown += m.Count
			}
		}
		return logged401 >= n401+nMetrics && loggedUnknown >= 3
	})
	lines, _ := logs.lines(logFrom)
	for _, l := range lines {
		if len(l) > lineBytes {
			t.Errorf("a log line of %d bytes: %.200s…", len(l), l)
		}
	}
	if len(lines) > keysPerSecond*seconds {
		t.Errorf("the floods wrote %d log lines over about %d s; want at most %d a second (refusals aggregated per flow per second)", len(lines), seconds, keysPerSecond)
	}
	if logged401 != n401+nMetrics || loggedUnknown != 3 {
		t.Errorf("refusals in the log: %d 401s, %d unknown tools; want %d and 3, exactly", logged401, loggedUnknown, n401+nMetrics)
	}

	if testing.Verbose() {
		var size int64
		for _, p := range []string{path, path + ".1"} {
			if fi, err := os.Stat(p); err == nil {
				size += fi.Size()
			}
		}
		t.Logf("floods: %d requests in about %d s; %d log lines; %d refusal records, %d audit bytes", nJunk+len(huge)+n401+3+nMetrics, seconds, len(lines), refusedRecords, size)
	}
}

// TestAnswersWithinResponseBytes: whatever a request names at length (a
// method, a tool's argument key or value, a resource, a prompt, a protocol
// version), the answer, the SDK's errors included, stays within
// limits.responseBytes.
func TestAnswersWithinResponseBytes(t *testing.T) {
	const responseBytes = 131072
	bk := startBackend(t, func(c *config.Config) {
		c.Limits.OutputBytes, c.Limits.ResponseBytes = 64<<10, responseBytes
	})
	big := strings.Repeat("q", 1<<20)
	for name, msg := range map[string]any{
		"method":          map[string]any{"jsonrpc": "2.0", "id": 1, "method": big},
		"argument key":    map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "system.info", "arguments": map[string]any{big: 1}}},
		"argument value":  map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "file.read", "arguments": map[string]any{"path": big}}},
		"argument type":   map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "file.read", "arguments": map[string]any{"path": []string{big}}}},
		"resource":        map[string]any{"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": map[string]any{"uri": big}},
		"prompt":          map[string]any{"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": map[string]any{"name": big}},
		"protocolVersion": map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": big, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": big, "version": "1"}}},
		"cancel":          map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": big}},
	} {
		body, _ := json.Marshal(msg)
		status, answer, err := post(context.Background(), bk.url+"/mcp", body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(answer) > responseBytes {
			t.Errorf("%s of 1 MB: HTTP %d, answer of %d bytes (limits.responseBytes %d): %.200s", name, status, len(answer), responseBytes, answer)
		}
	}
}
