package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

func shellResult(t testing.TB, stdout, stderr string) *mcp.CallToolResult {
	t.Helper()
	b, err := json.Marshal(map[string]any{"exitCode": 0, "signal": nil, "stdout": stdout, "stderr": stderr,
		"timedOut": false, "outputLimited": false, "durationMs": 1})
	if err != nil {
		t.Fatal(err)
	}
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// TestFitResult: whatever the content, the encoded result never exceeds the
// budget, small results pass untouched, and cut ones are flagged.
func TestFitResult(t *testing.T) {
	const budget = 64 << 10
	tests := []struct {
		name           string
		stdout, stderr string
		wantCut        bool
		textOnly       bool // only the text copy had to go
	}{
		{"small passes untouched", "hello\n", "", false, false},
		{"just under with its text copy", strings.Repeat("a", budget/2-2048), "", false, false},
		{"text copy dropped, content intact", strings.Repeat("a", budget/2), "", true, true},
		{"plain text over", strings.Repeat("a", budget), "", true, false},
		{"NUL bytes (6x on encoding)", strings.Repeat("\x00", budget/2), "", true, false},
		{"HTML-escaped characters", strings.Repeat("<&>", budget/3), "", true, false},
		{"invalid UTF-8", strings.Repeat("\xff\xfe", budget/2), "", true, false},
		{"both streams", strings.Repeat("\x1b", budget/4), strings.Repeat(`"\`, budget/4), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := shellResult(t, tc.stdout, tc.stderr)
			got, cut := fitResult(res, budget)
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > budget-envelopeSlack {
				t.Fatalf("encoded %d bytes, over the budget %d", len(b), budget-envelopeSlack)
			}
			if cut != tc.wantCut {
				t.Fatalf("cut = %v, want %v", cut, tc.wantCut)
			}
			if !cut {
				if got != res {
					t.Fatal("an untouched result was copied")
				}
				return
			}
			if tc.textOnly {
				if string(got.StructuredContent.(json.RawMessage)) != string(res.StructuredContent.(json.RawMessage)) {
					t.Fatal("structured content changed although it fit")
				}
				return
			}
			var out map[string]any
			raw, _ := json.Marshal(got.StructuredContent)
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatal(err)
			}
			if out["outputLimited"] != true || out["exitCode"] != float64(0) || got.Meta[truncatedMeta] != true {
				t.Fatalf("flags or fields lost: %v, _meta %v", out, got.Meta)
			}
			if _, added := out["truncated"]; added {
				t.Fatal("a key the output schema does not have was added")
			}
		})
	}
}

// TestResponseBoundWithHugeArguments: error messages used to echo the
// arguments they name whole, and the bound ignored _meta, which repeats
// the error envelope: a 3.5 MB relative path got a 7,000,383-byte answer
// over limits.responseBytes (6 MiB). Now every answer, errors included, is
// within the bound on the encoded bytes over real HTTP, arguments whose
// quoting multiplies their size (control bytes, quotes) included, and the
// error still says which argument was wrong.
func TestResponseBoundWithHugeArguments(t *testing.T) {
	b := startBackend(t, nil)
	limit := b.srv.cfg.Limits.ResponseBytes
	big := func(unit string, size int) string { return strings.Repeat(unit, size/len(unit)) }
	const mb = 1 << 20
	tests := []struct {
		name  string
		tool  string
		args  map[string]any
		field string // named in the error
	}{
		{"relative path (the report)", "file.read", map[string]any{"path": big("a", 3500000)}, `argument "path"`},
		{"relative path, control bytes", "file.read", map[string]any{"path": big("\x01", mb)}, `argument "path"`},
		{"relative path, quotes", "file.read", map[string]any{"path": big(`"\`, 3*mb)}, `argument "path"`},
		{"absolute path too long", "file.read", map[string]any{"path": "/" + big("a/", 3*mb)}, `argument "path"`},
		{"absolute path, control bytes", "file.read", map[string]any{"path": "/" + big("\x01", mb)}, `argument "path"`},
		{"file.list path", "file.list", map[string]any{"path": big("b", 3500000)}, `argument "path"`},
		{"file.write path", "file.write", map[string]any{"path": big("c", 3500000), "content": "x"}, `argument "path"`},
		{"file.write mode", "file.write", map[string]any{"path": "/nonexistent/x", "content": "x", "mode": big("9", 3*mb)}, `argument "mode"`},
		{"service.status unit", "service.status", map[string]any{"unit": big("u", 3500000)}, `argument "unit"`},
		{"service.status unit, control bytes", "service.status", map[string]any{"unit": big("\x01", mb)}, `argument "unit"`},
		{"service.control unit", "service.control", map[string]any{"unit": big("u", 3500000), "action": "restart"}, `argument "unit"`},
		{"service.control action", "service.control", map[string]any{"unit": "x.service", "action": big("r", 3500000)}, `argument "action"`},
		{"shell.exec command", "shell.exec", map[string]any{"command": big("echo ", 3500000)}, ""},
		{"shell.exec env value", "shell.exec", map[string]any{"command": "true", "env": map[string]any{"K": big("v", 3500000)}}, ""},
		{"shell.exec env key", "shell.exec", map[string]any{"command": "true", "env": map[string]any{big("K", 3500000): "v"}}, ""},
		{"shell.exec env key, control bytes", "shell.exec", map[string]any{"command": "true", "env": map[string]any{big("\x01", mb): "v"}}, ""},
		{"shell.exec cwd", "shell.exec", map[string]any{"command": "true", "cwd": big("d", 3500000)}, `argument "cwd"`},
		{"process.list name", "process.list", map[string]any{"name": big("\x01", mb)}, ""},
		{"unknown argument", "system.info", map[string]any{big("z", 3500000): 1}, "unknown argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := callRaw(t.Context(), b.url, tc.tool, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(body)) > limit {
				t.Fatalf("answer of %d bytes (HTTP %d) over limits.responseBytes %d: %.300s", len(body), status, limit, body)
			}
			r := parseReply(t, body)
			if status != 200 || r.Result == nil {
				t.Fatalf("HTTP %d: %.500s", status, body)
			}
			if code := r.errorCode(); code != "" && code != "INVALID_ARGUMENT" && code != "NOT_FOUND" && code != "PERMISSION_DENIED" && code != "UNAVAILABLE" && code != "INTERNAL" {
				t.Fatalf("tool error %s: %.500s", code, body)
			}
			if tc.field != "" {
				e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
				if e == nil || !strings.Contains(e.Message, tc.field) {
					t.Fatalf("the error does not name %s: %.500s", tc.field, body)
				}
				if len(e.Message) > toolerr.MaxMessage+64 {
					t.Fatalf("message of %d bytes, over toolerr.MaxMessage", len(e.Message))
				}
			}
			t.Logf("%d bytes, %s", len(body), r.errorCode())
		})
	}
}

// TestFitResultCountsMeta: a tool error whose envelope is large (built
// without toolerr.New, so its message is not cut) counts twice, text and
// _meta; the fitted result stays within the budget and keeps its code.
func TestFitResultCountsMeta(t *testing.T) {
	const budget = 64 << 10
	big := &mcp.CallToolResult{IsError: true}
	env, _ := json.Marshal(mcpwire.ErrorEnvelope{Error: &mcpwire.ToolError{Code: mcpwire.CodeNotFound, Message: strings.Repeat("m", budget*3/4)}})
	big.Content = []mcp.Content{&mcp.TextContent{Text: string(env)}}
	big.Meta = mcp.Meta{mcpwire.ErrorMetaKey: json.RawMessage(env)}
	got, cut := fitResult(big, budget)
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !cut || len(b) > budget {
		t.Fatalf("fitted to %d bytes (cut %v), budget %d", len(b), cut, budget)
	}
	if e := toolerr.FromResult(got); e == nil || e.Code != mcpwire.CodeNotFound {
		t.Fatalf("the code was lost: %s", b)
	}
}
