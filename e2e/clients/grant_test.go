package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

var (
	ctlOnce sync.Once
	ctlPath string
	ctlErr  error
)

// mcpctl builds the real mcpctl once.
func mcpctl(t testing.TB) string {
	t.Helper()
	ctlOnce.Do(func() {
		ctlPath = filepath.Join(filepath.Dir(binary), "mcpctl")
		if out, err := exec.Command("go", "build", "-o", ctlPath, "../../cmd/mcpctl").CombinedOutput(); err != nil {
			ctlErr = err
			ctlPath = string(out)
		}
	})
	if ctlErr != nil {
		t.Fatalf("build mcpctl: %v\n%s", ctlErr, ctlPath)
	}
	return ctlPath
}

// runCtl runs the built mcpctl and returns its exit code and stdout.
func runCtl(t testing.TB, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(mcpctl(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String() + errb.String()
}

// envelope is the error envelope of a tool error result.
type envelope struct {
	Code           string `json:"code"`
	Message        string `json:"message"`
	ApprovalID     string `json:"approvalId"`
	ApprovalStatus string `json:"approvalStatus"`
}

func envelopeOf(res *mcp.CallToolResult) envelope {
	var env struct {
		Error envelope `json:"error"`
	}
	if res.IsError && len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			_ = json.Unmarshal([]byte(tc.Text), &env)
		}
	}
	return env.Error
}

// TestGrant: a real server, ChatGPT-shaped calls (no elicitation, the
// principal in _meta), the real mcpctl. A call asks; the operator approves
// it --for 2m: the exact call runs three times without asking, a call
// differing in one argument asks, another principal asks; each run is
// audited with the grant's id; approvals list shows the live grant. A
// grant of 1s: once mcpctl no longer lists it live, the exact call asks
// again; revoke ends a live grant the same way.
func TestGrant(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "approvals")
	auditFile := filepath.Join(dir, "audit.jsonl")
	b := startHTTP(t, `{"audit":{"sink":"file","file":"`+auditFile+`"},"policy":{"approvals":{"dir":"`+store+`"},
		"rules":[{"id":"ask-touch","action":"ask","reason":"new files need a yes","commands":["touch *"]}]}}`)
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "chatgpt-shaped", Version: "1.0.0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(t *testing.T, who, command string) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": command},
			Meta: mcp.Meta{mcpwire.MetaSubject: who, "openai/session": "conv-" + who}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	asks := func(t *testing.T, who, command string) string {
		t.Helper()
		env := envelopeOf(call(t, who, command))
		if env.Code != string(mcpwire.CodeNeedsApproval) || env.ApprovalStatus != mcpwire.ApprovalPending || env.ApprovalID == "" {
			t.Fatalf("%s %q: %+v, want NEEDS_APPROVAL pending", who, command, env)
		}
		return env.ApprovalID
	}
	runs := func(t *testing.T, who, command string) {
		t.Helper()
		if res := call(t, who, command); res.IsError {
			t.Fatalf("%s %q: %+v, want it run under the grant", who, command, envelopeOf(res))
		}
	}
	grant := func(t *testing.T, id, span string) {
		t.Helper()
		if code, out := runCtl(t, "approvals", "approve", id, "--for", span, "--dir", store); code != 0 || !strings.Contains(out, "granted "+id) {
			t.Fatalf("approve --for %s: exit %d: %s", span, code, out)
		}
	}
	liveGrants := func(t *testing.T) []string {
		t.Helper()
		code, out := runCtl(t, "approvals", "list", "--json", "--dir", store)
		var list struct {
			Approvals []struct {
				ID    string
				Grant *struct{ Live bool }
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("approvals list: exit %d: %s", code, out)
		}
		var ids []string
		for _, a := range list.Approvals {
			if a.Grant != nil && a.Grant.Live {
				ids = append(ids, a.ID)
			}
		}
		return ids
	}

	exact := "touch " + filepath.Join(dir, "exact")
	id := asks(t, "alice", exact)
	grant(t, id, "2m")
	if got := liveGrants(t); len(got) != 1 || got[0] != id {
		t.Fatalf("approvals list shows live grants %v, want [%s]", got, id)
	}
	for _, tc := range []struct {
		name, who, command string
		runs               bool
	}{
		{"exact call, 1st", "alice", exact, true},
		{"exact call, 2nd", "alice", exact, true},
		{"exact call, 3rd", "alice", exact, true},
		{"one argument differs", "alice", exact + "2", false},
		{"another principal", "bob", exact, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.runs {
				runs(t, tc.who, tc.command)
			} else if other := asks(t, tc.who, tc.command); other == id {
				t.Fatalf("asked under the grant's own id %s", id)
			}
		})
	}
	// Every run under the grant audited with its id: its call.start.
	if n := auditCount(t, auditFile, "call.start", id); n != 3 {
		t.Fatalf("%d call.start records with MCP_GRANT_ID=%s, want 3", n, id)
	}

	t.Run("a grant that ends asks again", func(t *testing.T) {
		cmd := "touch " + filepath.Join(dir, "short")
		short := asks(t, "alice", cmd)
		grant(t, short, "1s")
		// No timed assertion: wait until mcpctl no longer lists it live.
		proctest.Eventually(t, "the 1s grant to end", func() bool { return !contains(liveGrants(t), short) })
		asks(t, "alice", cmd)
	})
	t.Run("revoke ends a grant", func(t *testing.T) {
		cmd := "touch " + filepath.Join(dir, "revoked")
		rid := asks(t, "alice", cmd)
		grant(t, rid, "2m")
		runs(t, "alice", cmd)
		if code, out := runCtl(t, "approvals", "revoke", rid, "--dir", store); code != 0 || !strings.Contains(out, "revoked "+rid) {
			t.Fatalf("revoke: exit %d: %s", code, out)
		}
		asks(t, "alice", cmd)
		if code, out := runCtl(t, "approvals", "revoke", rid, "--dir", store); code == 0 || !strings.Contains(out, "not a live grant") {
			t.Fatalf("revoke twice: exit %d: %s", code, out)
		}
	})
	t.Run("NEEDS_APPROVAL says whether the operator is notified", func(t *testing.T) {
		st, err := approvals.Open(store, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, notified := range []bool{false, true, false} {
			what := ""
			if notified {
				what = "/usr/local/bin/notify" // as mcpctl unit install writes it
			}
			if err := st.SetNotifier(what); err != nil {
				t.Fatal(err)
			}
			env := envelopeOf(call(t, "carol", "touch "+filepath.Join(dir, "told")+string(rune('0'+i))))
			told := strings.Contains(env.Message, "The operator has been notified of approval "+env.ApprovalID+" (it expires at ")
			if env.Code != string(mcpwire.CodeNeedsApproval) || env.ApprovalID == "" || told != notified ||
				!strings.Contains(env.Message, "send this same call again") {
				t.Fatalf("notifier %v: %+v", notified, env)
			}
		}
	})
	t.Run("bounded", func(t *testing.T) {
		rid := asks(t, "alice", "touch "+filepath.Join(dir, "long"))
		if code, out := runCtl(t, "approvals", "approve", rid, "--for", "25h", "--dir", store); code != 2 || !strings.Contains(out, "at most 24h") {
			t.Fatalf("approve --for 25h: exit %d: %s", code, out)
		}
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// auditCount counts the audit file's records of event carrying grant id.
func auditCount(t testing.TB, file, event, grant string) int {
	t.Helper()
	f, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(f))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]string
		if json.Unmarshal(sc.Bytes(), &r) == nil && r["MCP_EVENT"] == event && r["MCP_GRANT_ID"] == grant {
			n++
		}
	}
	return n
}
