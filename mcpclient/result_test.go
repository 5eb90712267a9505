package mcpclient

import (
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	okResult := `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"stdout":"S 1\nE 2\n"}}}`
	// toolErr is a failed result as the backend sends it: the envelope as
	// the JSON text content and in _meta, no structuredContent.
	toolErr := func(code string) string {
		env := `{"error":{"code":"` + code + `","message":"m","retryable":true}}`
		return `{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":` + quote(env) + `}],"_meta":{"mcp-backend/error":` + env + `}}}`
	}
	tests := []struct {
		name      string
		status    int
		transport string
		ctype     string
		body      string
		want      Kind
		code      string
	}{
		{"json ok", 200, "", "application/json", okResult, KindOK, ""},
		{"sse ok", 200, "", "text/event-stream", "event: message\ndata: " + okResult + "\n\n", KindOK, ""},
		{"sse crlf and notification first", 200, "", "text/event-stream; charset=utf-8",
			"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nid: 1\r\ndata: " + okResult + "\r\n\r\n", KindOK, ""},
		{"sse sniffed without content type", 200, "", "", "data: " + okResult + "\n\n", KindOK, ""},
		{"overloaded", 200, "", "application/json", toolErr("OVERLOADED"), KindToolError, "OVERLOADED"},
		{"cancelled over sse", 200, "", "text/event-stream", "data: " + toolErr("CANCELLED") + "\n\n", KindToolError, "CANCELLED"},
		{"envelope only in _meta", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"busy"}],"_meta":{"mcp-backend/error":{"error":{"code":"TIMEOUT","message":"m"}}}}}`, KindToolError, "TIMEOUT"},
		{"envelope only as text", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"m\"}}"}]}}`, KindToolError, "NOT_FOUND"},
		{"envelope only in structuredContent (older builds)", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"x"}],"structuredContent":{"error":{"code":"OVERLOADED","message":"m","retryable":true}}}}`, KindToolError, "OVERLOADED"},
		{"_meta before text before structuredContent", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"{\"error\":{\"code\":\"NOT_FOUND\"}}"}],` +
				`"structuredContent":{"error":{"code":"INTERNAL"}},"_meta":{"mcp-backend/error":{"error":{"code":"PERMISSION_DENIED"}}}}}`, KindToolError, "PERMISSION_DENIED"},
		{"text before structuredContent", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"{\"error\":{\"code\":\"NOT_FOUND\"}}"}],` +
				`"structuredContent":{"error":{"code":"INTERNAL"}}}}`, KindToolError, "NOT_FOUND"},
		{"tool error without envelope", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"OVERLOADED"}]}}`, KindToolError, ""},
		{"json-rpc error", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"boom"}}`, KindRPCError, "-32603"},
		{"json-rpc error with id null", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`, KindRPCError, "-32700"},
		{"http 500", 500, "", "text/plain", "too busy", KindHTTPError, "500"},
		{"http 401", 401, "", "text/plain", "no token", KindHTTPError, "401"},
		{"transport", 0, "dial tcp: connection refused", "", "", KindTransport, ""},
		{"body read failed", 200, "unexpected EOF", "application/json", "", KindTransport, ""},
		{"wrong id", 200, "", "application/json", strings.Replace(okResult, `"id":7`, `"id":8`, 1), KindBadReply, ""},
		{"not json", 200, "", "application/json", "<html>", KindBadReply, ""},
		{"empty", 200, "", "application/json", "", KindBadReply, ""},
		{"sse without response", 200, "", "text/event-stream", ": ping\n\n", KindBadReply, ""},
		{"result not an object", 200, "", "application/json", `{"jsonrpc":"2.0","id":7,"result":[1]}`, KindBadReply, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(7, tc.status, tc.transport, tc.ctype, []byte(tc.body))
			if got.Kind != tc.want || got.Code != tc.code {
				t.Fatalf("Classify = %s %q (%s), want %s %q", got.Kind, got.Code, got.Detail, tc.want, tc.code)
			}
			if (got.Kind == KindOK) != (got.Err() == nil) {
				t.Fatalf("Err() = %v for kind %s", got.Err(), got.Kind)
			}
			if got.Kind != KindOK && got.Detail == "" {
				t.Fatalf("kind %s without a detail", got.Kind)
			}
		})
	}
}

func TestPayloadAndShell(t *testing.T) {
	tests := []struct {
		name, body, stdout string
	}{
		{"structured", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ignored"}],"structuredContent":{"exitCode":0,"stdout":"a\n"}}}`, "a\n"},
		{"text only", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{\"exitCode\":0,\"stdout\":\"b\\n\"}"}]}}`, "b\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Classify(7, 200, "", "application/json", []byte(tc.body))
			sh, err := r.Shell()
			if err != nil || sh.Stdout != tc.stdout || sh.ExitCode == nil || *sh.ExitCode != 0 {
				t.Fatalf("Shell() = %+v, %v; want stdout %q and exit 0", sh, err, tc.stdout)
			}
		})
	}
	r := Classify(7, 200, "", "application/json", []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"not json"}]}}`))
	if r.Payload() != nil {
		t.Fatalf("Payload() = %s, want nil for non-JSON text", r.Payload())
	}
	if _, err := r.Shell(); err == nil {
		t.Fatal("Shell() of a non-JSON result: want an error")
	}
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
