package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// askAllBackend asks about apt-get and touch: an approval for one asked
// command must not be spent on another.
func askAllBackend(t *testing.T, mutate func(*config.Config)) (*backend, *approvals.Store) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "approvals")
	b := startBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{
			{ID: "ask-apt", Action: policy.Ask, Reason: "package changes", Commands: []string{"apt-get *"}},
			{ID: "ask-touch", Action: policy.Ask, Reason: "new files", Commands: []string{"touch *"}},
		}
		c.Jobs.Mode = config.JobsProcess
		c.Jobs.StateDir = t.TempDir()
		c.Policy.Approvals.Dir = dir
		if mutate != nil {
			mutate(c)
		}
	})
	st, err := approvals.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, st
}

// TestArgumentsDecodedOnceStrictly: an argument object the tool's schema
// refuses (a key in another case, a duplicate key in any case) is
// refused INVALID_ARGUMENT naming the key before the policy sees it: no
// approval is made, and the swapped object, sent after the operator
// approved what was shown, runs nothing.
func TestArgumentsDecodedOnceStrictly(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		name       string
		ask, swap  string
		wantInText string
	}{
		{"key in another case", `{"Command":"touch MARKER","command":"apt-get update"}`,
			`{"command":"apt-get update","Command":"touch MARKER"}`, `Command`},
		{"duplicate key in upper case", `{"COMMAND":"touch MARKER","command":"apt-get update"}`,
			`{"command":"apt-get update","COMMAND":"touch MARKER"}`, `COMMAND`},
		{"key in another case in job.start", `{"Command":"touch MARKER","command":"apt-get update","waitMs":0}`,
			`{"command":"apt-get update","Command":"touch MARKER","waitMs":0}`, `Command`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(dir, fmt.Sprint(i))
			tc.ask, tc.swap = strings.ReplaceAll(tc.ask, "MARKER", marker), strings.ReplaceAll(tc.swap, "MARKER", marker)
			b, st := askAllBackend(t, nil)
			tool := mcpwire.ToolShellExec
			if strings.Contains(tc.name, "job.start") {
				tool = mcpwire.ToolJobStart
			}
			first := envelopeOf(t, jobCallAs(t, b, "alice", "c1", tool, json.RawMessage(tc.ask)))
			if first.ApprovalID != "" {
				// Today's behaviour: asked about, then approved by the
				// operator who saw "apt-get update".
				if _, err := st.Decide(first.ApprovalID, true, "operator"); err != nil {
					t.Fatal(err)
				}
			}
			second := envelopeOf(t, jobCallAs(t, b, "alice", "c1", tool, json.RawMessage(tc.swap)))
			if second.JobID != "" {
				okAs[mcpwire.JobWaitResult](t, b, "alice", mcpwire.ToolJobWait, map[string]any{"id": second.JobID, "waitMs": 30000})
			}
			if _, err := os.Stat(marker); err == nil {
				os.Remove(marker)
				t.Fatalf("approved %+v, and the swapped arguments ran touch", first)
			}
			if first.Code != mcpwire.CodeInvalidArgument || !strings.Contains(first.Message, tc.wantInText) {
				t.Errorf("asked: %s %q, want INVALID_ARGUMENT naming %s", first.Code, first.Message, tc.wantInText)
			}
			if second.Code != mcpwire.CodeInvalidArgument {
				t.Errorf("swapped: %s %q, want INVALID_ARGUMENT", second.Code, second.Message)
			}
			if list, _ := st.List(); len(list) != 0 {
				t.Errorf("%d approvals made for refused arguments: %+v", len(list), list)
			}
		})
	}
}

// TestApprovalExpiryIsTheExpiry: an approved approval whose call comes
// back after its expiry runs nothing (today it ran up to twice expireMs
// after it was made), and mcpctl's store says expired.
func TestApprovalExpiryIsTheExpiry(t *testing.T) {
	b, st := askAllBackend(t, func(c *config.Config) { c.Policy.Approvals.ExpireMs = 3000 })
	marker := filepath.Join(t.TempDir(), "late")
	args := map[string]any{"command": "touch " + marker}
	first := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, args))
	r, err := st.Decide(first.ApprovalID, true, "operator")
	if err != nil {
		t.Skipf("the machine took longer than the expiry to decide: %v", err)
	}
	for !time.Now().After(r.ExpiresAt.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}
	if got, _ := st.Get(first.ApprovalID); got.Status != mcpwire.ApprovalExpired {
		t.Errorf("approved, unclaimed, past its expiry: status %s, want expired", got.Status)
	}
	late := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, args))
	if late.JobID != "" {
		okAs[mcpwire.JobWaitResult](t, b, "alice", mcpwire.ToolJobWait, map[string]any{"id": late.JobID, "waitMs": 30000})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("ran after its approval expired: %+v", late)
	}
	if late.Code != mcpwire.CodeNeedsApproval || late.ApprovalStatus != mcpwire.ApprovalPending || late.ApprovalID == first.ApprovalID {
		t.Fatalf("after the expiry: %+v, want a new pending approval", late)
	}
}

// TestApprovalNotBurntByRefusedVariant: a variant of the approved call
// that the tool refuses (timeoutMs written 60000.0) is refused before the
// approval is claimed; the call as approved then runs once.
func TestApprovalNotBurntByRefusedVariant(t *testing.T) {
	b, st := askAllBackend(t, nil)
	marker := filepath.Join(t.TempDir(), "variant")
	cmd := `"command":"touch ` + marker + `"`
	first := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, json.RawMessage(`{`+cmd+`,"timeoutMs":60000}`)))
	if _, err := st.Decide(first.ApprovalID, true, "operator"); err != nil {
		t.Fatal(err)
	}
	for _, variant := range []string{`{` + cmd + `,"timeoutMs":60000.0}`, `{` + cmd + `,"timeoutMs":6e4}`} {
		e := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, json.RawMessage(variant)))
		if e.Code != mcpwire.CodeInvalidArgument || !strings.Contains(e.Message, "timeoutMs") {
			t.Errorf("variant %s: %s %q, want INVALID_ARGUMENT naming timeoutMs", variant, e.Code, e.Message)
		}
	}
	if st.Claimed(first.ApprovalID) {
		t.Fatal("a refused variant claimed the approval")
	}
	ran := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, json.RawMessage(`{"timeoutMs":60000,`+cmd+`}`)))
	if ran.JobID == "" {
		t.Fatalf("the call as approved: %+v, want its job", ran)
	}
	w := okAs[mcpwire.JobWaitResult](t, b, "alice", mcpwire.ToolJobWait, map[string]any{"id": ran.JobID, "waitMs": 30000})
	if _, err := os.Stat(marker); err != nil || w.Job.ExitCode == nil || *w.Job.ExitCode != 0 {
		t.Fatalf("the approved call did not run: %+v %v", w.Job, err)
	}
}

// TestAskShowsTheWholeCall: what is asked about is everything that will
// run: the NEEDS_APPROVAL text, the stored approval mcpctl shows, and the
// consent form name every part of the command (not only the part a rule
// asked about), assignments, here-strings, env and cwd, each part with
// the rule that judged it.
func TestAskShowsTheWholeCall(t *testing.T) {
	b, st := askAllBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "ask-apt", Action: policy.Ask, Reason: "package changes", Commands: []string{"apt-get *"}}}
	})
	x := filepath.Join(t.TempDir(), "X")
	for i, tc := range []struct {
		name   string
		args   map[string]any
		want   []string
		stored []string // what mcpctl approvals show shows (want, when nil)
	}{
		{"a second command", map[string]any{"command": "apt-get update; touch " + x},
			[]string{"apt-get update; touch " + x, "ask   ask-apt: apt-get update", "allow policy.default: touch " + x}, nil},
		{"after &&", map[string]any{"command": "apt-get update && touch " + x},
			[]string{"apt-get update && touch " + x, "allow policy.default: touch " + x}, nil},
		{"an assignment and a here-string", map[string]any{"command": "APT_CONFIG=/dev/stdin apt-get update <<< 'APT::Update::Pre-Invoke {\"touch " + x + "\";};'"},
			[]string{"APT_CONFIG=/dev/stdin apt-get update <<< 'APT::Update::Pre-Invoke {\"touch " + x + "\";};'", "policy.opaque"}, nil},
		{"a here-document", map[string]any{"command": "apt-get update\ncat > " + x + " <<EOF\nline one\nEOF"},
			[]string{"  | cat > " + x + " <<EOF", "  | line one", "  | EOF"}, nil},
		{"too long to show whole: cut visibly", map[string]any{"command": "apt-get update; " + strings.Repeat("echo padding; ", 100) + "touch " + x},
			[]string{"more bytes cut]", "ask   ask-apt: apt-get update", "[70 more parts allowed, not shown]"},
			[]string{"; echo padding; touch " + x, "allow policy.default: touch " + x}},
		{"env and cwd", map[string]any{"command": "apt-get update", "env": map[string]string{"APT_CONFIG": "/dev/stdin", "B": "2"}, "cwd": "/tmp"},
			[]string{"env:\n  | APT_CONFIG=/dev/stdin\n  | B=2", "cwd: /tmp", "policy.opaque"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := fmt.Sprint("c", i)
			e := envelopeOf(t, jobCallAs(t, b, "alice", conv, mcpwire.ToolShellExec, tc.args))
			if e.Code != mcpwire.CodeNeedsApproval {
				t.Fatalf("%s %q, want NEEDS_APPROVAL", e.Code, e.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("NEEDS_APPROVAL text lacks %q:\n%s", w, e.Message)
				}
			}
			r, err := st.Get(e.ApprovalID)
			if err != nil {
				t.Fatal(err)
			}
			text := approvals.ViewOf(r.Tool, r.Arguments, r.Parts).Text(0)
			if tc.stored == nil {
				tc.stored = tc.want
			}
			for _, w := range tc.stored {
				if !strings.Contains(text, w) {
					t.Errorf("the stored approval shows no %q:\n%s", w, text)
				}
			}
		})
	}
	// The consent form asks about the same whole call.
	eb := startBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "ask-apt", Action: policy.Ask, Reason: "package changes", Commands: []string{"apt-get *"}}}
	})
	cs, asked := elicitingClient(t, eb.url, func(*mcp.ElicitParams) *mcp.ElicitResult { return &mcp.ElicitResult{Action: "decline"} }, true)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpwire.ToolShellExec,
		Arguments: map[string]any{"command": "apt-get update; touch " + x, "cwd": "/tmp", "env": map[string]string{"B": "2"}}}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"apt-get update; touch " + x, "allow policy.default: touch " + x, "ask   ask-apt: apt-get update", "cwd: /tmp", "B=2"} {
		if len(*asked) != 1 || !strings.Contains((*asked)[0], w) {
			t.Errorf("the consent form lacks %q: %q", w, *asked)
		}
	}
	if _, err := os.Stat(x); err == nil {
		t.Fatal("something ran")
	}
}

// TestPendingApprovalsSharedAcrossPrincipals: one principal minting
// conversations (many asks at once) cannot take every pending place:
// other principals still get theirs, and beyond its share or its own
// bound it is refused OVERLOADED scope principal.
func TestPendingApprovalsSharedAcrossPrincipals(t *testing.T) {
	for _, tc := range []struct {
		name         string
		perPrincipal int
		maxMallory   int
	}{
		{"shares only", 0, 14}, // 16 places, the last 2 kept for principals that hold none
		{"a bound per principal", 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, st := askAllBackend(t, func(c *config.Config) {
				c.Policy.Approvals.MaxPending = 16
				c.Policy.Approvals.MaxPendingPerConversation = 2
				if tc.perPrincipal > 0 {
					c.Policy.Approvals.MaxPendingPerPrincipal = tc.perPrincipal
				}
			})
			const asks = 40
			codes := make(chan *toolerrEnvelope, asks)
			var wg sync.WaitGroup
			for i := range asks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := envelopeOf(t, jobCallAs(t, b, "mallory", fmt.Sprint("m", i/2), mcpwire.ToolShellExec, map[string]any{"command": fmt.Sprint("touch /nonexistent/m", i)}))
					codes <- &toolerrEnvelope{e.Code, e.Scope}
				}()
			}
			wg.Wait()
			close(codes)
			got := map[string]int{}
			for e := range codes {
				got[string(e.code)+"/"+e.scope]++
			}
			t.Logf("mallory's %d asks: %v", asks, got)
			if n := got[string(mcpwire.CodeNeedsApproval)+"/"]; n == 0 || n > tc.maxMallory {
				t.Errorf("mallory holds %d pending approvals, want 1..%d", n, tc.maxMallory)
			}
			if got[string(mcpwire.CodeOverloaded)+"/"+mcpwire.ScopePrincipal] == 0 {
				t.Errorf("no OVERLOADED scope principal among %v", got)
			}
			for _, who := range []string{"alice", "bob"} {
				e := envelopeOf(t, jobCallAs(t, b, who, "c1", mcpwire.ToolShellExec, map[string]any{"command": "touch /nonexistent/" + who}))
				if e.Code != mcpwire.CodeNeedsApproval {
					t.Errorf("%s after mallory's flood: %s %q, want a pending approval", who, e.Code, e.Message)
				}
			}
			list, _ := st.List()
			if len(list) > 16 {
				t.Errorf("%d pending approvals, more than maxPending", len(list))
			}
		})
	}
}

type toolerrEnvelope struct {
	code  mcpwire.Code
	scope string
}
