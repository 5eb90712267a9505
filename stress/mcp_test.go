package stress

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestClassify checks the outcome the stress gives each kind of answer;
// the parsing itself (JSON and SSE, ids, where the error code sits) is
// mcpclient's and tested there.
func TestClassify(t *testing.T) {
	okResult := `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"stdout":"S 1\nE 2\n"}}}`
	toolErr := func(code string) string {
		env := `{"error":{"code":"` + code + `","message":"m","retryable":true}}`
		return `{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"x"}],"_meta":{"mcp-backend/error":` + env + `}}}`
	}
	tests := []struct {
		name      string
		status    int
		transport string
		ctype     string
		body      string
		want      Outcome
		code      string
	}{
		{"ok", 200, "", "application/json", okResult, OutcomeOK, ""},
		{"overloaded", 200, "", "application/json", toolErr("OVERLOADED"), OutcomeOverloaded, "OVERLOADED"},
		{"cancelled over sse", 200, "", "text/event-stream", "data: " + toolErr("CANCELLED") + "\n\n", OutcomeCancelled, "CANCELLED"},
		{"other tool error", 200, "", "application/json", toolErr("TIMEOUT"), OutcomeToolError, "TIMEOUT"},
		{"tool error without envelope", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"result":{"isError":true,"content":[{"type":"text","text":"OVERLOADED"}]}}`, OutcomeToolError, ""},
		{"json-rpc error", 200, "", "application/json",
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"boom"}}`, OutcomeRPCError, "-32603"},
		{"http 500", 500, "", "text/plain", "too busy", OutcomeHTTPError, "500"},
		{"transport", 0, "dial tcp: connection refused", "", "", OutcomeTransport, ""},
		{"wrong id", 200, "", "application/json", strings.Replace(okResult, `"id":7`, `"id":8`, 1), OutcomeBadReply, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(7, tc.status, tc.transport, tc.ctype, []byte(tc.body))
			if got.Outcome != tc.want || got.Code != tc.code {
				t.Fatalf("Classify = %s %q (%s), want %s %q", got.Outcome, got.Code, got.Detail, tc.want, tc.code)
			}
		})
	}
}

func TestShellOfAndSpan(t *testing.T) {
	r := Classify(7, 200, "", "application/json",
		[]byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[],"structuredContent":{"exitCode":0,"stdout":"S 100\nE 250\n","timedOut":false}}}`))
	sh, err := r.Shell()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ParseSpan(sh.Stdout)
	if err != nil || sp != (Span{100, 250}) {
		t.Fatalf("span = %v, %v; want {100 250}", sp, err)
	}
	for _, bad := range []string{"", "S 1\n", "E 2\n", "S 5\nE 1\n", "S x\nE 2\n"} {
		if _, err := ParseSpan(bad); err == nil {
			t.Errorf("ParseSpan(%q) = nil error, want one", bad)
		}
	}
}

func TestTagRoundTripAndNotOnTheWire(t *testing.T) {
	u := Tag("http://127.0.0.1:1/mcp", "shell.exec", 42)
	tool, id, err := ParseTag(u)
	if err != nil || tool != "shell.exec" || id != 42 {
		t.Fatalf("ParseTag(%q) = %q %d %v", u, tool, id, err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := pu.RequestURI(); got != "/mcp" {
		t.Fatalf("request URI %q: the tag must not reach the server", got)
	}
	for _, bad := range []string{"http://x/mcp", "http://x/mcp#shell.exec", "http://x/mcp#/1", "http://x/mcp#a/b"} {
		if _, _, err := ParseTag(bad); err == nil {
			t.Errorf("ParseTag(%q) = nil error", bad)
		}
	}
}

func TestTrafficMixAndUniqueIDs(t *testing.T) {
	tr, err := NewTraffic("http://127.0.0.1:1", Mix{Shell: 5, Normal: 3, Control: 2}, 100*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	count := map[mcpwire.Class]int{}
	tools := map[string]int{}
	for range 100 {
		id, tool, body := tr.Next()
		if seen[id] {
			t.Fatalf("id %d repeated", id)
		}
		seen[id] = true
		count[mcpwire.ClassOf(tool)]++
		tools[tool]++
		if !strings.Contains(string(body), `"method":"tools/call"`) {
			t.Fatalf("body %s is not a tools/call", body)
		}
	}
	if count[mcpwire.ClassShell] != 50 || count[mcpwire.ClassNormal] != 30 || count[mcpwire.ClassControl] != 20 {
		t.Fatalf("class counts %v, want 50/30/20", count)
	}
	for _, tool := range []string{"file.list", "file.read", "system.info", "process.list"} {
		if tools[tool] == 0 {
			t.Errorf("tool %s never offered", tool)
		}
	}
	if _, err := NewTraffic("http://x", Mix{}, time.Second, 1); err == nil {
		t.Fatal("empty mix accepted")
	}
}

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:3211", true},
		{"http://127.3.4.5:80", true},
		{"http://localhost:3211", true},
		{"http://[::1]:3211", true},
		{"http://10.0.0.1:3211", false},
		{"http://example.com", false},
		{"https://127.0.0.1:3211", false},
		{"127.0.0.1:3211", false},
	}
	for _, tc := range tests {
		if err := CheckLoopback(tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok %t", tc.url, err, tc.ok)
		}
	}
}
