package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestFrameRefusesAmbiguousKeys: a message whose keys a case-insensitive,
// last-wins decoder and an exact one would read differently is refused
// with a JSON-RPC error naming the key, through the real handler; the same
// shapes without the ambiguity are served (the negative control).
func TestFrameRefusesAmbiguousKeys(t *testing.T) {
	b := startBackend(t, nil)
	for _, tc := range []struct {
		name, body, key string // key: what the error must name; "" = served
	}{
		{"tool name in two cases", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell.exec","Name":"system.info","arguments":{"command":"id -un"}}}`, `"Name"`},
		{"tool name twice", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"system.info","name":"shell.exec","arguments":{"command":"id -un"}}}`, `"name"`},
		{"method in upper case", `{"jsonrpc":"2.0","id":3,"method":"tools/call","METHOD":"ping","params":{"name":"system.info","arguments":{}}}`, `"METHOD"`},
		{"id in two cases", `{"jsonrpc":"2.0","id":9007199254740993,"ID":4,"method":"ping"}`, `"ID"`},
		{"params by Unicode folding", `{"jsonrpc":"2.0","id":5,"method":"tools/call","paramſ":{"name":"shell.exec"},"params":{"name":"system.info","arguments":{}}}`, `"paramſ"`},
		{"escaped duplicate", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"system.info","n\u0061me":"shell.exec","arguments":{}}}`, `"name"`},
		{"duplicate deep in arguments", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"true","env":{"A":"1","A":"2"}}}}`, `"A"`},
		{"duplicate _meta key", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"system.info","arguments":{},"_meta":{"openai/session":"a","openai/session":"b"}}}`, `"openai/session"`},
		{"plain call", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`, ""},
		{"case variants inside arguments are the tool's", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"true","env":{"PATH_X":"1","path_x":"2"}}}}`, ""},
		{"many keys, none repeated", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"true","env":{` + manyKeys(40) + `}}}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := post(context.Background(), b.url+"/mcp", []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			r := parseReply(t, body)
			if tc.key == "" {
				if status != http.StatusOK || r.Error != nil || r.errorCode() != "" {
					t.Fatalf("served badly: %d %s", status, body)
				}
				return
			}
			if status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, tc.key) {
				t.Fatalf("want 400 -32600 naming %s, got %d %s", tc.key, status, body)
			}
		})
	}
	if m := b.metrics(t); m.Counters.Accepted != 3 {
		t.Fatalf("accepted %d, want only the 3 served calls", m.Counters.Accepted)
	}
}

func manyKeys(n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"K` + strings.Repeat("x", i) + `":"v"`)
	}
	return sb.String()
}

// TestOAuthScopeBypassRefused: the bypass of the second hostile-input pass,
// with a real mcp:read token from the real authorization server: a
// shell.exec hidden behind a second "Name" key, and a ping hidden behind
// "METHOD", are refused before anything runs; the plain shell.exec is 403.
func TestOAuthScopeBypassRefused(t *testing.T) {
	env := startOAuthEnv(t)
	tok := env.clientToken(t, env.as.Issuer, env.resources[0], "mcp:read")
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell.exec","Name":"system.info","arguments":{"command":"id -un"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"Name":"system.info","name":"shell.exec","arguments":{"command":"id -un"}}}`,
		`{"jsonrpc":"2.0","id":3,"METHOD":"ping","method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"id -un"}}}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, env.tunnels[0]+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || bytes.Contains(got, []byte("root")) {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, got)
		}
	}
	status, _, _ := callTool(t, env.tunnels[0], tok, "shell.exec", map[string]any{"command": "id -un"})
	if status != http.StatusForbidden {
		t.Fatalf("plain shell.exec with mcp:read: %d, want 403", status)
	}
	if c := env.srv.Admission().Snapshot().Counters; c.Accepted != 0 {
		t.Fatalf("a refused call reached admission: %+v", c)
	}
}

// TestScopeCheckedWhereToolRuns: the middleware refuses a call the token's
// scopes do not grant and a call whose dispatched name is not the one the
// intake read, even when the intake let it through (defense in depth; the
// real intake never does, see the fuzz target below).
func TestScopeCheckedWhereToolRuns(t *testing.T) {
	env := startOAuthEnv(t)
	reader := &oauth.Identity{Subject: "alice", Scopes: []string{"mcp:read"}}
	ran := 0
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) {
		ran++
		return &mcp.CallToolResult{}, nil
	}
	h := env.srv.admit(next)
	for _, tc := range []struct {
		name, tool, intake string
		want               mcpwire.Code
	}{
		{"scope not granted", mcpwire.ToolShellExec, mcpwire.ToolShellExec, mcpwire.CodePermissionDenied},
		{"intake read another tool", mcpwire.ToolShellExec, mcpwire.ToolSystemInfo, mcpwire.CodeInvalidArgument},
		{"intake read no call", mcpwire.ToolSystemInfo, "", mcpwire.CodeInvalidArgument},
		{"granted and agreed", mcpwire.ToolSystemInfo, mcpwire.ToolSystemInfo, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran
			// "scope not granted" has no intake (stdio's way: the
			// middleware checks the scope); the others carry the HTTP
			// intake's reading in the context.
			ctx := context.Background()
			if tc.name != "scope not granted" {
				ctx = withIntake(ctx, &intake{tool: tc.intake})
			}
			req := &mcp.CallToolRequest{
				Params: &mcp.CallToolParamsRaw{Name: tc.tool, Arguments: json.RawMessage(`{}`)},
				Extra:  &mcp.RequestExtra{TokenInfo: reader.TokenInfo(), Header: http.Header{}},
			}
			res, err := h(ctx, "tools/call", req)
			if err != nil {
				t.Fatal(err)
			}
			code := ""
			if r := res.(*mcp.CallToolResult); r.IsError {
				code = outcome(r)
			}
			if code != string(tc.want) {
				t.Fatalf("outcome %q, want %q", code, tc.want)
			}
			if (tc.want == "") != (ran == before+1) {
				t.Fatalf("tool ran %d times", ran-before)
			}
		})
	}
}

// FuzzIntakeAgreesWithDispatch: for every message the intake accepts as a
// tools/call, the tool the SDK runs is the one the intake authorised and
// shed by. The tools are replaced by recorders so nothing runs.
func FuzzIntakeAgreesWithDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell.exec","Name":"system.info","arguments":{"command":"x"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","METHOD":"ping","params":{"name":"file.read","arguments":{"path":"/"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"file.list","n\u0061me":"shell.exec"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping","params":{"name":"shell.exec"}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/c\u0061ll","params":{"name":"shell.exec","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"shell.exec","arguments":{},"_meta":{"openai/session":"s"}}}`,
	} {
		f.Add([]byte(s))
	}
	b := startBackend(f, nil)
	var mu sync.Mutex
	var ran []string // "intake|dispatched" of each tool that ran
	for _, name := range mcpwire.ToolNames() {
		b.srv.mcp.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			read := "(no intake)"
			if in := intakeOf(ctx); in != nil {
				read = in.tool
			}
			mu.Lock()
			ran = append(ran, read+"|"+req.Params.Name)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	}
	h := b.srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		ran = ran[:0]
		mu.Unlock()
		req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		req.Header.Set("X-Mcp-Backend-Tool", "forged") // no header crosses: ignored
		h.ServeHTTP(httptest.NewRecorder(), req)
		mu.Lock()
		defer mu.Unlock()
		for _, r := range ran {
			intake, dispatched, _ := strings.Cut(r, "|")
			if intake != dispatched {
				t.Fatalf("intake read %q, the SDK ran %q for %q", intake, dispatched, body)
			}
		}
		if n := b.srv.disagreed.Load(); n != 0 {
			t.Fatalf("%d calls refused for disagreeing (the frame check let %q through)", n, body)
		}
	})
}
