package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/server"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// realHandler is the real backend's HTTP handler with default config.
func realHandler(t testing.TB) http.Handler {
	t.Helper()
	srv, err := server.New(config.Default(), nil)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv.Handler()
}

func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// override answers path with f and everything else with the real handler.
func override(real http.Handler, path string, f http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			f(w, r)
			return
		}
		real.ServeHTTP(w, r)
	})
}

// rewriteTool passes /mcp to the real handler and lets edit change the
// JSON-RPC response of calls to tool.
func rewriteTool(real http.Handler, tool string, edit func(resp map[string]any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if r.URL.Path != "/mcp" || !strings.Contains(string(body), `"name":"`+tool+`"`) {
			real.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		real.ServeHTTP(rec, r)
		var resp map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			http.Error(w, "test: backend answer not JSON", 500)
			return
		}
		edit(resp)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
}

func structured(resp map[string]any) map[string]any {
	return resp["result"].(map[string]any)["structuredContent"].(map[string]any)
}

func TestBackendAgainstRealHandler(t *testing.T) {
	url := serve(t, realHandler(t))
	ctx := context.Background()
	own := buildinfo.ExecutableDigest()
	r := Backend(ctx, url, Expect{Version: buildinfo.Version, Digest: own})
	if !r.OK() {
		t.Fatalf("report not OK: %v", r.Err())
	}
	want := []string{CheckHealthz, CheckReadyz, CheckSystemInfo, CheckShellExec, CheckFileList}
	if len(r.Checks) != len(want) {
		t.Fatalf("got %d checks, want %d", len(r.Checks), len(want))
	}
	for i, name := range want {
		if r.Checks[i].Name != name {
			t.Errorf("check %d is %q, want %q", i, r.Checks[i].Name, name)
		}
	}
	if r.Version != buildinfo.Version || r.Build != own {
		t.Errorf("report version/build = %q/%q, want %q/%q", r.Version, r.Build, buildinfo.Version, own)
	}
	if tr := Tunnel(ctx, url); !tr.OK() {
		t.Fatalf("tunnel report not OK: %v", tr.Err())
	}
}

func TestBackendFailsOnTheRightCheck(t *testing.T) {
	real := realHandler(t)
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "broken", code) }
	}
	tests := []struct {
		name    string
		handler http.Handler
		want    Expect
		failed  string
		errHas  string
	}{
		{"healthz 500", override(real, "/healthz", status(500)), Expect{}, CheckHealthz, "HTTP 500"},
		{"readyz 503", override(real, "/readyz", status(503)), Expect{}, CheckReadyz, "HTTP 503"},
		{"wrong version", real, Expect{Version: "v9.9.9"}, CheckSystemInfo, `want "v9.9.9"`},
		{"wrong digest", real, Expect{Digest: "sha256:" + strings.Repeat("0", 64)}, CheckSystemInfo, "backend.build"},
		{"shell stdout wrong", rewriteTool(real, "shell.exec", func(m map[string]any) {
			structured(m)["stdout"] = "something else\n"
		}), Expect{}, CheckShellExec, "stdout"},
		{"shell exit 1", rewriteTool(real, "shell.exec", func(m map[string]any) {
			structured(m)["exitCode"] = 1
		}), Expect{}, CheckShellExec, "exit code 1"},
		{"file.list tool error", rewriteTool(real, "file.list", func(m map[string]any) {
			res := m["result"].(map[string]any)
			res["isError"] = true
			// The backend's error shape: no structuredContent, the envelope as text.
			delete(res, "structuredContent")
			env := `{"error":{"code":"PERMISSION_DENIED","message":"no","retryable":false}}`
			res["content"] = []any{map[string]any{"type": "text", "text": env}}
			res["_meta"] = map[string]any{"mcp-backend/error": json.RawMessage(env)}
		}), Expect{}, CheckFileList, "PERMISSION_DENIED"},
		{"file.list tool error without structuredContent", rewriteTool(real, "file.list", func(m map[string]any) {
			env := map[string]any{"error": map[string]any{"code": "NOT_FOUND", "message": "no", "retryable": false}}
			text, _ := json.Marshal(env)
			m["result"] = map[string]any{
				"isError": true,
				"content": []any{map[string]any{"type": "text", "text": string(text)}},
				"_meta":   map[string]any{"mcp-backend/error": env},
			}
		}), Expect{}, CheckFileList, "NOT_FOUND"},
		{"mcp 500", override(real, "/mcp", status(500)), Expect{}, CheckSystemInfo, "HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Backend(context.Background(), serve(t, tc.handler), tc.want)
			if r.OK() {
				t.Fatal("report OK, want a failure")
			}
			c := r.Check(tc.failed)
			if c == nil || c.OK {
				t.Fatalf("check %q did not fail; failed: %+v", tc.failed, r.Failed())
			}
			if !strings.Contains(c.Err, tc.errHas) {
				t.Errorf("check %q error %q does not mention %q", tc.failed, c.Err, tc.errHas)
			}
			if err := r.Err(); err == nil || !strings.Contains(err.Error(), tc.failed) {
				t.Errorf("Err() = %v, want it to name %q", err, tc.failed)
			}
		})
	}
}

func TestTunnelFailsOnTheRightCheck(t *testing.T) {
	real := realHandler(t)
	r := Tunnel(context.Background(), serve(t, override(real, "/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	})))
	if c := r.Check(CheckReadyz); c == nil || c.OK {
		t.Fatalf("readyz did not fail: %+v", r.Checks)
	}
	if c := r.Check(CheckShellExec); c == nil || !c.OK {
		t.Fatalf("shell.exec should pass: %+v", r.Checks)
	}
	// Nothing listening: every check fails.
	ts := httptest.NewServer(real)
	url := ts.URL
	ts.Close()
	if r := Tunnel(context.Background(), url); len(r.Failed()) != 2 {
		t.Fatalf("want both checks failed against a closed port, got %+v", r.Checks)
	}
}

// TestCallToolSSE reframes the real backend's JSON answer as an event stream.
func TestCallToolSSE(t *testing.T) {
	real := realHandler(t)
	sse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		real.ServeHTTP(rec, r)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n")
		fmt.Fprintf(w, "event: message\nid: 1\ndata: %s\n\n", strings.TrimSpace(rec.Body.String()))
	})
	url := serve(t, sse)
	sc, code, err := CallTool(context.Background(), url, "shell.exec", map[string]any{"command": "echo hi"})
	if err != nil || code != "" {
		t.Fatalf("CallTool: code %q err %v", code, err)
	}
	var res struct{ Stdout string }
	if err := json.Unmarshal(sc, &res); err != nil || res.Stdout != "hi\n" {
		t.Fatalf("stdout %q (err %v), want %q", res.Stdout, err, "hi\n")
	}
}

func TestCallToolErrors(t *testing.T) {
	url := serve(t, realHandler(t))
	ctx := context.Background()
	sc, code, err := CallTool(ctx, url, "file.list", map[string]any{"path": "relative"})
	if err != nil || code != "INVALID_ARGUMENT" {
		t.Fatalf("file.list relative: code %q err %v, want INVALID_ARGUMENT", code, err)
	}
	if !strings.Contains(string(sc), "INVALID_ARGUMENT") {
		t.Errorf("structured error %s lacks the code", sc)
	}
	if _, _, err := CallTool(ctx, url, "no.such.tool", nil); err == nil {
		t.Error("unknown tool: want an error")
	}
	tsURL := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ ID json.RawMessage }
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"error":{"code":-32603,"message":"boom"}}`)
	}))
	if _, _, err := CallTool(ctx, tsURL, "system.info", nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("JSON-RPC error: got %v, want it to carry the message", err)
	}
}
