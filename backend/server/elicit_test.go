package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// askPolicy asks before touch.
func askPolicy(c *config.Config) {
	c.Policy.Rules = []policy.Rule{{ID: "ask-touch", Action: policy.Ask, Reason: "new files need a yes", Commands: []string{"touch *"}}}
}

// elicitingClient is a real SDK client (2026-07-28, stateless over HTTP)
// whose elicitation handler answers with answer and records the questions.
func elicitingClient(t testing.TB, url string, answer func(*mcp.ElicitParams) *mcp.ElicitResult, mrtr bool) (*mcp.ClientSession, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked = append(asked, req.Params.Message)
			mu.Unlock()
			return answer(req.Params), nil
		},
	}
	if !mrtr {
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "elicit-test", Version: "1"}, opts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, &asked
}

func resultCode(r *mcp.CallToolResult) string {
	if !r.IsError {
		return ""
	}
	if e := toolerr.Decode([]byte(textOf(r))); e != nil {
		return string(e.Code) + ": " + e.Message
	}
	return "UNSTRUCTURED"
}

// TestElicitationAcceptRunsDeclineRefuses: a client that declared
// elicitation is asked (the form shows the exact command and the rule);
// accept runs the command once, decline and cancel refuse it
// PERMISSION_DENIED; every answer is audited.
func TestElicitationAcceptRunsDeclineRefuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	b := startBackend(t, func(c *config.Config) {
		askPolicy(c)
		c.Audit.Sink, c.Audit.File = config.AuditFile, file
	})
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		answer *mcp.ElicitResult
		runs   bool
		audit  string
	}{
		{"accept", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, true, "accepted"},
		{"accept without approve", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}, false, "declined"},
		{"decline", &mcp.ElicitResult{Action: "decline"}, false, "declined"},
		{"cancel", &mcp.ElicitResult{Action: "cancel"}, false, "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			cs, asked := elicitingClient(t, b.url, func(*mcp.ElicitParams) *mcp.ElicitResult { return tc.answer }, true)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": "touch " + marker}})
			if err != nil {
				t.Fatal(err)
			}
			if len(*asked) != 1 || !strings.Contains((*asked)[0], "touch "+marker) || !strings.Contains((*asked)[0], "ask-touch") {
				t.Fatalf("the user was asked %q, want one question naming the command and the rule", *asked)
			}
			_, statErr := os.Stat(marker)
			if tc.runs {
				if res.IsError || statErr != nil {
					t.Fatalf("accepted but did not run: %s %v", resultCode(res), statErr)
				}
				return
			}
			if code := resultCode(res); !strings.HasPrefix(code, "PERMISSION_DENIED") || !strings.Contains(code, "ask-touch") {
				t.Fatalf("got %q, want PERMISSION_DENIED naming the rule", code)
			}
			if statErr == nil {
				t.Fatal("refused, yet the command ran")
			}
		})
	}
	b.srv.Close()
	got := map[string]int{}
	for _, r := range auditRecords(t, file) {
		if r["MCP_EVENT"] == "policy.decision" && r["MCP_POLICY_RULE"] == "ask-touch" && r["MCP_APPROVAL_VIA"] == "elicitation" {
			got[r["MCP_APPROVAL"]]++
		}
		if r["MCP_EVENT"] == "call.start" && r["MCP_POLICY_ACTION"] == "ask" && r["MCP_APPROVED_BY"] == "user" {
			got["start-approved-by-user"]++
		}
	}
	want := map[string]int{"asked": 4, "accepted": 1, "declined": 2, "cancelled": 1, "start-approved-by-user": 1}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("audit: %d %s records, want %d (all: %v)", got[k], k, n, got)
		}
	}
}

// TestElicitationAnswerIsSpentOnce: the answer and state of an accepted
// ask, sent again (replayed) or with other arguments, run nothing.
func TestElicitationAnswerIsSpentOnce(t *testing.T) {
	b := startBackend(t, askPolicy)
	dir := t.TempDir()
	cs, _ := elicitingClient(t, b.url, nil, false)
	call := func(p *mcp.CallToolParams) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := filepath.Join(dir, "first")
	args := map[string]any{"command": "touch " + first}
	q := call(&mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: args})
	if !q.NeedsInput() || q.InputRequests == nil || q.RequestState == "" {
		t.Fatalf("want an input_required result, got %+v", q)
	}
	yes := mcp.InputResponseMap{elicitKey: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	// Other arguments with this answer: refused, nothing runs.
	other := filepath.Join(dir, "other")
	if r := call(&mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": "touch " + other}, InputResponses: yes, RequestState: q.RequestState}); !strings.HasPrefix(resultCode(r), "PERMISSION_DENIED") {
		t.Fatalf("an answer for another call ran: %s", resultCode(r))
	}
	if r := call(&mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: args, InputResponses: yes, RequestState: q.RequestState}); r.IsError {
		t.Fatalf("the answered call did not run: %s", resultCode(r))
	}
	if err := os.Remove(first); err != nil {
		t.Fatalf("accepted call left no marker: %v", err)
	}
	if r := call(&mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: args, InputResponses: yes, RequestState: q.RequestState}); !strings.Contains(resultCode(r), "already used") {
		t.Fatalf("a replayed answer: %s", resultCode(r))
	}
	for _, p := range []string{first, other} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s ran", p)
		}
	}
}
