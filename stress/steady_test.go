package stress_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/stress"
)

// TestSteadyCountsEachFailureSeparately runs the steady profile through the
// real backend and through targets that fail each way a tunnel can: a
// closed connection, an HTTP error, a JSON-RPC error and a tool error. Each
// target's calls land in its own count and nowhere else; the real backend's
// are all ok.
func TestSteadyCountsEachFailureSeparately(t *testing.T) {
	real, _ := startBackend(t, backendBinary(t))

	// Accepts and closes at once: the client sees EOF, as through a tunnel
	// whose backend went away.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	badGateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "tunnel: no upstream", http.StatusBadGateway)
	}))
	defer badGateway.Close()
	// Fakes only for the faults the real backend cannot show on demand:
	// it answers with the id the steady client numbers calls with.
	rpcError := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + id(t, r) + `,"error":{"code":-32603,"message":"internal"}}`))
	}))
	defer rpcError.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + id(t, r) + `,"result":{"isError":true,"content":[{"type":"text","text":"{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":\"backend restarting\",\"retryable\":true}}"}]}}`))
	}))
	defer unavailable.Close()

	targets := []string{real, "http://" + ln.Addr().String(), badGateway.URL, rpcError.URL, unavailable.URL}
	rep, err := stress.RunSteady(context.Background(), stress.SteadyConfig{Targets: targets, Rate: 50, Duration: 2 * time.Second, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Targets) != len(targets) {
		t.Fatalf("%d target counts, want %d", len(rep.Targets), len(targets))
	}
	only := func(c stress.SteadyCounts) (ok, transport, http, rpc, tool int) {
		return c.OK, c.Transport, c.HTTP, c.JSONRPC, c.Tool
	}
	tests := []struct {
		name                           string
		counts                         stress.SteadyCounts
		ok, transport, http, rpc, tool bool
		code                           func(stress.SteadyCounts) int
	}{
		{"real backend", rep.Targets[0], true, false, false, false, false, nil},
		{"closed connection", rep.Targets[1], false, true, false, false, false, nil},
		{"bad gateway", rep.Targets[2], false, false, true, false, false, func(c stress.SteadyCounts) int { return c.HTTPByStatus["502"] }},
		{"JSON-RPC error", rep.Targets[3], false, false, false, true, false, func(c stress.SteadyCounts) int { return c.JSONRPCByCode["-32603"] }},
		{"tool error", rep.Targets[4], false, false, false, false, true, func(c stress.SteadyCounts) int { return c.ToolByCode["UNAVAILABLE"] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.counts
			if c.Calls == 0 {
				t.Fatal("no calls")
			}
			ok, transport, http, rpc, tool := only(c)
			for _, f := range []struct {
				what string
				n    int
				want bool
			}{{"ok", ok, tc.ok}, {"transport", transport, tc.transport}, {"http", http, tc.http}, {"json-rpc", rpc, tc.rpc}, {"tool", tool, tc.tool}} {
				if (f.n == c.Calls) != f.want || (!f.want && f.n != 0) {
					t.Errorf("%s = %d of %d calls, want all: %v", f.what, f.n, c.Calls, f.want)
				}
			}
			if tc.code != nil && tc.code(c) != c.Calls {
				t.Errorf("by code %+v %+v %+v: want all %d calls under the code", c.HTTPByStatus, c.JSONRPCByCode, c.ToolByCode, c.Calls)
			}
			if c.Wait.Count != c.Calls || c.Wait.MaxMs <= 0 {
				t.Errorf("wait %+v for %d calls", c.Wait, c.Calls)
			}
		})
	}
	if rep.Total.Calls != sum(rep.Targets) || rep.Total.Clean() {
		t.Fatalf("total %+v: want every call counted once and the failures seen", rep.Total)
	}
	if !rep.Targets[0].Clean() || rep.Targets[4].Tool == 0 || !rep.Targets[4].Clean() {
		t.Fatal("a tool error (UNAVAILABLE) is an answer, not a transport, HTTP or JSON-RPC failure")
	}
}

func sum(cs []stress.SteadyCounts) int {
	n := 0
	for _, c := range cs {
		n += c.Calls
	}
	return n
}

// id reads the JSON-RPC id of a steady call from its body.
func id(t testing.TB, r *http.Request) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	s := b.String()
	i := strings.Index(s, `"id":`)
	if i < 0 {
		t.Errorf("no id in %s", s)
		return "0"
	}
	rest := s[i+5:]
	j := strings.IndexAny(rest, ",}")
	return strings.TrimSpace(rest[:j])
}

func TestCheckSteady(t *testing.T) {
	tests := []struct {
		name string
		cfg  stress.SteadyConfig
		want string
	}{
		{"no target", stress.SteadyConfig{}, "no target"},
		{"not a URL", stress.SteadyConfig{Targets: []string{"127.0.0.1:1"}}, `target "127.0.0.1:1"`},
		{"rate too high", stress.SteadyConfig{Targets: []string{"http://x"}, Rate: stress.MaxRate + 1}, "rate"},
		{"negative duration", stress.SteadyConfig{Targets: []string{"http://x"}, Duration: -1}, "duration"},
		{"ok", stress.SteadyConfig{Targets: []string{"http://127.0.0.1:1", "https://tunnel.example.com/"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := stress.CheckSteady(tc.cfg)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
