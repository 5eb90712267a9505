package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// backend is a real Server behind a real HTTP listener.
type backend struct {
	srv  *Server
	http *httptest.Server
	url  string
}

// testConfig is the default config adjusted by mutate, validated.
func testConfig(t testing.TB, mutate func(*config.Config)) config.Config {
	t.Helper()
	cfg := config.Default()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startBackend(t testing.TB, mutate func(*config.Config)) *backend {
	t.Helper()
	cfg := testConfig(t, mutate)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv := newServer(t, cfg, log)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return &backend{srv: srv, http: hs, url: hs.URL}
}

// newServer is New for a test, whose audit log is closed when the test
// ends. Server.Close leaves the log open, as the process writes its stop
// record after it (cmd/mcp-backend): a test stands for the process here,
// or the log's goroutines outlive it (see TestMain).
func newServer(t testing.TB, cfg config.Config, log *slog.Logger, opts ...Option) *Server {
	t.Helper()
	srv, err := New(cfg, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the caller's cleanups have
	// stopped serving (t.Cleanup runs last in, first out).
	t.Cleanup(func() {
		if err := srv.Audit().Close(5 * time.Second); err != nil {
			t.Errorf("closing the audit log: %v", err)
		}
	})
	return srv
}

var rpcID atomic.Int64

// callRaw posts one tools/call as a plain HTTP client would, in a
// conversation of its own (ChatGPT's shape: a fresh session per call, the
// conversation in _meta), so tests that drive the global limits do it with
// many conversations, as real traffic does.
func callRaw(ctx context.Context, url, tool string, args any) (int, []byte, error) {
	id := rpcID.Add(1)
	return callAs(ctx, url, fmt.Sprintf("conversation-%d", id), tool, args)
}

// callAs posts one tools/call in conversation conv (its _meta
// openai/session; "" for none).
func callAs(ctx context.Context, url, conv, tool string, args any) (int, []byte, error) {
	params := map[string]any{"name": tool, "arguments": args}
	if conv != "" {
		params["_meta"] = map[string]any{"openai/session": conv}
	}
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call", "params": params,
	})
	return post(ctx, url+"/mcp", body)
}

func post(ctx context.Context, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// toolReply is the parsed JSON-RPC answer of a tools/call.
type toolReply struct {
	Result *struct {
		IsError           bool                       `json:"isError"`
		StructuredContent json.RawMessage            `json:"structuredContent"`
		Meta              map[string]json.RawMessage `json:"_meta"`
		Content           []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseReply(t testing.TB, b []byte) toolReply {
	t.Helper()
	// SSE framing, should the server use it.
	if bytes.HasPrefix(b, []byte("event:")) || bytes.HasPrefix(b, []byte("data:")) {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				b = []byte(d)
			}
		}
	}
	var r toolReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply is not JSON-RPC: %v: %.300s", err, b)
	}
	return r
}

// errorCode returns the tool error code, or "" for success.
func (r toolReply) errorCode() string {
	if r.Result == nil || !r.Result.IsError {
		return ""
	}
	if len(r.Result.StructuredContent) > 0 {
		// Strict clients would reject it against the outputSchema.
		return "STRUCTURED"
	}
	e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
	if e == nil {
		return "UNSTRUCTURED"
	}
	for _, c := range r.Result.Content {
		if t := toolerr.Decode([]byte(c.Text)); t == nil || *t != *e {
			return "TEXT_DIFFERS"
		}
	}
	return string(e.Code)
}

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return resp.StatusCode
}

func (b *backend) metrics(t testing.TB) mcpwire.Metrics {
	t.Helper()
	var s mcpwire.Metrics
	if code := getJSON(t, b.url+"/metrics", &s); code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	return s
}

// gate releases the test's blocked commands: the test holds an exclusive
// flock on a file and each command waits for a shared one, so a blocked
// command costs no CPU (a polling loop of 40 shells forked 800 sleeps a
// second and starved a 2-core machine) and one started after the gate
// opened passes at once.
type gate struct {
	path string
	f    *os.File
}

func newGate(t testing.TB) gate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "go")
	f, err := os.Create(path)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return gate{path, f}
}

// command blocks until the gate opens (bounded, so nothing outlives a
// failed test: it fails after 30 s).
func (g gate) command() string {
	return fmt.Sprintf("flock -s -w 30 %s true", g.path)
}

func (g gate) open(t testing.TB) {
	t.Helper()
	if err := syscall.Flock(int(g.f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
}

// statusOf sends req and returns its HTTP status.
func statusOf(t testing.TB, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// holdShell occupies one shell slot with a command that waits for g, and
// returns a channel closed when that call has answered.
func (b *backend) holdShell(t testing.TB, g gate) <-chan struct{} {
	t.Helper()
	before := b.metrics(t).Active.Shell
	done := make(chan struct{})
	go func() {
		defer close(done)
		callRaw(context.Background(), b.url, "shell.exec", map[string]any{"command": g.command()})
	}()
	proctest.Eventually(t, "one more shell running", func() bool { return b.metrics(t).Active.Shell == before+1 })
	return done
}
