package server

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/internal/golden"
	"github.com/overdeck/mcp-backend/mcpwire"
)

func approvalBackend(t *testing.T) (*backend, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "approvals")
	b := startBackend(t, func(c *config.Config) {
		askPolicy(c)
		c.Jobs.Mode = config.JobsProcess
		c.Policy.Approvals.Dir = dir
		c.Policy.Approvals.MaxPendingPerConversation = 2
	})
	return b, dir
}

func envelopeOf(t testing.TB, r toolReply) *toolerr.Error {
	t.Helper()
	if r.Result == nil || !r.Result.IsError {
		t.Fatalf("want a tool error, got %+v", r)
	}
	e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
	if e == nil {
		t.Fatalf("no error envelope: %+v", r)
	}
	return e
}

// TestOperatorApprovalRunsAsJobOnce: a client that cannot be asked gets a
// pending approval (NEEDS_APPROVAL with its id, nothing runs); sending the
// call again while pending makes no second one; once the operator
// approved it, the same call starts it as a job whose output the job
// tools read; sending it again runs nothing.
func TestOperatorApprovalRunsAsJobOnce(t *testing.T) {
	b, dir := approvalBackend(t)
	marker := filepath.Join(t.TempDir(), "approved")
	args := map[string]any{"command": "touch " + marker + " && echo ran-once"}
	call := func() *toolerr.Error {
		return envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, args))
	}
	first := call()
	if first.Code != mcpwire.CodeNeedsApproval || first.ApprovalStatus != mcpwire.ApprovalPending || !approvals.ValidID(first.ApprovalID) ||
		!strings.Contains(first.Message, "mcpctl approvals approve "+first.ApprovalID) {
		t.Fatalf("first call: %+v", first)
	}
	if again := call(); again.ApprovalID != first.ApprovalID || again.ApprovalStatus != mcpwire.ApprovalPending {
		t.Fatalf("the same call pending: %+v, want the same approval", again)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("ran before approval")
	}
	st, err := approvals.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := st.List()
	if len(list) != 1 || list[0].Tool != mcpwire.ToolShellExec || !strings.Contains(string(list[0].Arguments), "ran-once") || list[0].Principal != "alice" {
		t.Fatalf("stored approvals: %+v", list)
	}
	if _, err := st.Decide(first.ApprovalID, true, "operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Decide(first.ApprovalID, false, "operator"); !errors.Is(err, approvals.ErrDecided) {
		t.Fatalf("a second decision: %v", err)
	}
	started := call()
	if started.Code != mcpwire.CodeNeedsApproval || started.ApprovalStatus != mcpwire.ApprovalApproved || started.JobID == "" {
		t.Fatalf("approved call: %+v, want its job", started)
	}
	w := okAs[mcpwire.JobWaitResult](t, b, "alice", mcpwire.ToolJobWait, map[string]any{"id": started.JobID, "waitMs": 30000})
	if !w.Job.Done || w.Job.ExitCode == nil || *w.Job.ExitCode != 0 || !strings.Contains(string(chunkBytes(t, w.Stdout)), "ran-once") {
		t.Fatalf("the approved job: %+v", w)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	// Replayed: refused, runs nothing.
	if replay := call(); replay.Code != mcpwire.CodePermissionDenied || !strings.Contains(replay.Message, "used already") {
		t.Fatalf("replayed approved call: %+v", replay)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a replayed approval ran the command again")
	}
	jl := okAs[mcpwire.JobList](t, b, "alice", mcpwire.ToolJobList, map[string]any{})
	if jl.Total != 1 {
		t.Fatalf("%d jobs, want the one approved", jl.Total)
	}
	// Another principal sending the same call is another call.
	if other := envelopeOf(t, jobCallAs(t, b, "mallory", "c1", mcpwire.ToolShellExec, args)); other.Code != mcpwire.CodeNeedsApproval || other.ApprovalID == first.ApprovalID {
		t.Fatalf("another principal's call: %+v", other)
	}
}

// TestExpiredApprovalRunsNothing: an approval the operator did not decide
// in time cannot be approved, and the call sent again is a new pending
// one; a denied one is PERMISSION_DENIED; a conversation's pending
// approvals are bounded.
func TestExpiredApprovalRunsNothing(t *testing.T) {
	b, dir := approvalBackend(t)
	marker := filepath.Join(t.TempDir(), "expired")
	args := map[string]any{"command": "touch " + marker}
	first := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, args))
	later, err := approvals.Open(dir, func() time.Time { return time.Now().Add(time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.Decide(first.ApprovalID, true, "operator"); !errors.Is(err, approvals.ErrExpired) {
		t.Fatalf("approving an expired approval: %v", err)
	}
	st, _ := approvals.Open(dir, nil)
	// Denied.
	if _, err := st.Decide(first.ApprovalID, false, "operator"); err != nil {
		t.Fatal(err)
	}
	if e := envelopeOf(t, jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, args)); e.Code != mcpwire.CodePermissionDenied || !strings.Contains(e.Message, "denied approval "+first.ApprovalID) {
		t.Fatalf("denied: %+v", e)
	}
	// Bounded: two pending in c2, the third refused.
	for i, want := range []mcpwire.Code{mcpwire.CodeNeedsApproval, mcpwire.CodeNeedsApproval, mcpwire.CodeOverloaded} {
		e := envelopeOf(t, jobCallAs(t, b, "bob", "c2", mcpwire.ToolShellExec, map[string]any{"command": "touch " + marker + string(rune('a'+i))}))
		if e.Code != want {
			t.Fatalf("pending approval %d: %+v, want %s", i, e, want)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(marker))
	if len(ents) != 0 {
		t.Fatalf("something ran: %v", ents)
	}
}

// TestNeedsApprovalGolden pins the NEEDS_APPROVAL envelope.
func TestNeedsApprovalGolden(t *testing.T) {
	at := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	d := policyDecisionForGolden()
	parts := []mcpwire.JudgedPart{{Text: "apt-get upgrade -y", Action: "ask", Rule: "ask-upgrades", Reason: "package changes"},
		{Text: "touch /tmp/x", Action: "allow", Rule: "policy.default", Reason: "no rule matches"}}
	for _, tc := range []struct {
		name     string
		notified bool
	}{{"needs-approval.json", false}, {"needs-approval-notified.json", true}} {
		t.Run(tc.name, func(t *testing.T) {
			res := needsApproval(mcpwire.Approval{ID: "a0123456789abcdef", Status: mcpwire.ApprovalPending, ExpiresAt: at, Tool: mcpwire.ToolShellExec, Parts: parts,
				Arguments: json.RawMessage(`{"command":"apt-get upgrade -y; touch /tmp/x","cwd":"/srv","env":{"DEBIAN_FRONTEND":"noninteractive"}}`)}, d, tc.notified)
			b, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, append(b, '\n'))
		})
	}
}

func policyDecisionForGolden() policy.Decision {
	return policy.Decision{Action: policy.Ask, Rule: "ask-upgrades", Reason: "package changes", Target: "apt-get upgrade -y"}
}
