package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
)

// refusalCounter sums the counts of the refusal log's "tool calls refused"
// lines: how many times a step refused a call.
type refusalCounter struct{ n atomic.Int64 }

func (c *refusalCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *refusalCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *refusalCounter) WithGroup(string) slog.Handler            { return c }
func (c *refusalCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "tool calls refused" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "count" {
			c.n.Add(a.Value.Int64())
		}
		return true
	})
	return nil
}

// chainBackend is a real Server behind a real HTTP listener and a stdio
// session of its own, with its refusals counted.
type chainBackend struct {
	srv      *Server
	url      string
	refused  *refusalCounter
	stdioMu  sync.Mutex
	stdioIn  io.Writer
	stdioOut *bufio.Reader
}

func startChainBackend(t *testing.T, mutate func(*config.Config)) *chainBackend {
	t.Helper()
	cfg := testConfig(t, mutate)
	rc := &refusalCounter{}
	srv := newServer(t, cfg, slog.New(rc))
	hs := httptest.NewServer(srv.Handler())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeStdio(ctx, srv.StdioTransport(inR, outW)) }()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		<-done
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	b := &chainBackend{srv: srv, url: hs.URL, refused: rc, stdioIn: inW, stdioOut: bufio.NewReader(outR)}
	b.stdio(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	return b
}

// stdio sends one line and returns the answer's line.
func (b *chainBackend) stdio(t *testing.T, msg string) []byte {
	t.Helper()
	b.stdioMu.Lock()
	defer b.stdioMu.Unlock()
	if _, err := io.WriteString(b.stdioIn, msg+"\n"); err != nil {
		t.Fatal(err)
	}
	line, err := b.stdioOut.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// refusals flushes the refusal log and returns every refusal so far.
func (b *chainBackend) refusals() int64 {
	b.srv.refusals.flush()
	return b.refused.n.Load()
}

// answer is what a step answered: a JSON-RPC error code, or a tool
// result's error code ("" for a success).
func answer(t *testing.T, body []byte) string {
	r := parseReply(t, body)
	if r.Error != nil {
		return fmt.Sprintf("rpc %d", r.Error.Code)
	}
	return "tool " + r.errorCode()
}

// TestCallChainSteps: each step of call.go's chain refuses what it is for
// with one answer over HTTP and over stdio, counted once among the
// refusals (or the policy's denials) and before admission; a call that
// passes every step runs. Each check has one implementation: if a step ran
// in two places, or differed by transport, an answer or a count would
// differ.
func TestCallChainSteps(t *testing.T) {
	b := startChainBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "no-rm", Action: policy.Deny, Commands: []string{"rm *"}}}
	})
	call := func(id int, tool, args string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,"_meta":{"openai/session":"chain"}}}`, id, tool, args)
	}
	for _, tc := range []struct {
		step, msg string
		want      string // the answer, both transports
		refusals  int64  // counted by the refusal log
		denials   int64  // counted by the policy
		accepted  int64  // admitted
	}{
		{"parse: not JSON", `{"jsonrpc":"2.0","id":1,"method":`, "rpc -32700", 0, 0, 0},
		{"parse: a batch", `[` + call(2, "system.info", `{}`) + `]`, "rpc -32600", 0, 0, 0},
		{"parse: an id that does not round-trip", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "rpc -32600", 0, 0, 0},
		{"parse: neither request nor response", `{"jsonrpc":"2.0","params":{}}`, "rpc -32600", 0, 0, 0},
		{"tool: not ours", call(3, "no.such.tool", `{}`), "rpc -32602", 1, 0, 0},
		{"arguments: the wrong type", call(4, "shell.exec", `{"command":5}`), "tool INVALID_ARGUMENT", 1, 0, 0},
		{"arguments: a key no tool reads", call(5, "system.info", `{"verbose":true}`), "tool INVALID_ARGUMENT", 1, 0, 0},
		{"policy: denied", call(6, "shell.exec", `{"command":"rm -rf /nonexistent"}`), "tool PERMISSION_DENIED", 0, 1, 0},
		{"run: every step passed", call(7, "system.info", `{}`), "tool ", 0, 0, 1},
	} {
		for _, transport := range []string{"http", "stdio"} {
			t.Run(tc.step+"/"+transport, func(t *testing.T) {
				refusals, denials := b.refusals(), b.srv.policy.deny.Load()
				accepted := b.srv.Admission().Snapshot().Counters.Accepted
				var body []byte
				if transport == "http" {
					_, got, err := post(context.Background(), b.url+"/mcp", []byte(tc.msg))
					if err != nil {
						t.Fatal(err)
					}
					body = got
				} else {
					body = b.stdio(t, tc.msg)
				}
				if got := answer(t, body); got != tc.want {
					t.Fatalf("answer %q, want %q: %.300s", got, tc.want, body)
				}
				if n := b.refusals() - refusals; n != tc.refusals {
					t.Errorf("refusals counted %d, want %d", n, tc.refusals)
				}
				if n := b.srv.policy.deny.Load() - denials; n != tc.denials {
					t.Errorf("policy denials %d, want %d", n, tc.denials)
				}
				if n := b.srv.Admission().Snapshot().Counters.Accepted - accepted; n != tc.accepted {
					t.Errorf("admitted %d, want %d", n, tc.accepted)
				}
			})
		}
	}
	// The early shed (HTTP's intake) and admission (stdio's) are one check:
	// once stopping, both transports answer UNAVAILABLE, counted once.
	b.srv.beginStopping()
	for _, transport := range []string{"http", "stdio"} {
		t.Run("shed: stopping/"+transport, func(t *testing.T) {
			refusals := b.refusals()
			var body []byte
			msg := call(8, "system.info", `{}`)
			if transport == "http" {
				_, got, err := post(context.Background(), b.url+"/mcp", []byte(msg))
				if err != nil {
					t.Fatal(err)
				}
				body = got
			} else {
				body = b.stdio(t, msg)
			}
			if got := answer(t, body); got != "tool UNAVAILABLE" {
				t.Fatalf("answer %q, want UNAVAILABLE: %.300s", got, body)
			}
			if n := b.refusals() - refusals; n != 1 {
				t.Errorf("refusals counted %d, want 1", n)
			}
		})
	}
	if n := b.srv.disagreed.Load(); n != 0 {
		t.Errorf("%d calls dispatched under another name than the intake read", n)
	}
}
