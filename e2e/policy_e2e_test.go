package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// policySite is a production site (mcpctl's units, the backend's own
// StateDirectory for its jobs and approvals, no directory flags anywhere)
// whose backend's policy asks before any touch.
func policySite(t *testing.T, expireMs int64) *site {
	s := newSite(t, 60*time.Second)
	s.writePolicy(expireMs)
	s.restartBackend()
	return s
}

func (s *site) writePolicy(expireMs int64) {
	s.T.Helper()
	nspawntest.WriteJSON(s.T, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "policy": map[string]any{
		"default":   "allow",
		"rules":     []map[string]any{{"id": "ask-touch", "action": "ask", "reason": "touch changes files", "commands": []string{"touch *"}}},
		"approvals": map[string]any{"expireMs": expireMs},
	}})
}

// approvalsCtl runs mcpctl approvals inside the container, as an operator
// would, with no --dir: the default must be where the backend keeps them.
func (s *site) approvalsCtl(args ...string) (int, string) {
	s.T.Helper()
	return s.Run(append([]string{"approvals"}, args...)...)
}

// TestPolicyApprovalsInSystemd: a client without elicitation asks for a
// command the policy asks about; the call waits as a pending approval in
// the backend's state directory; `mcpctl approvals approve`, run in the
// container with its defaults, lets the same call run once as a job (a
// transient unit in mcp-jobs.slice) whose output the client reads with the
// job tools; the call sent again (a replay) and an approval decided after
// it expired run nothing.
func TestPolicyApprovalsInSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := policySite(t, 15*60*1000)
	const alice = "alice"
	marker := filepath.Join(s.Dir, "touched")
	call := map[string]any{"command": fmt.Sprintf("touch %s && echo ran-once", marker)}

	te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, call, nil)
	if te == nil || te.Code != mcpwire.CodeNeedsApproval || te.ApprovalStatus != mcpwire.ApprovalPending || te.ApprovalID == "" {
		t.Fatalf("the first call: %+v, want a pending approval", te)
	}
	id := te.ApprovalID
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the command ran before approval (%v)", err)
	}
	// Where production keeps them: the unit's StateDirectory.
	s.inContainer("test", "-f", "/var/lib/mcp-backend/approvals/"+id+".json")

	code, out := s.approvalsCtl("list", "--json")
	var l struct {
		Approvals []mcpwire.Approval `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &l); code != 0 || err != nil || len(l.Approvals) != 1 || l.Approvals[0].ID != id {
		t.Fatalf("mcpctl approvals list (exit %d, %v): %s", code, err, out)
	}
	if code, out := s.approvalsCtl("show", id); code != 0 || !strings.Contains(out, "touch "+marker) || !strings.Contains(out, "ask-touch") {
		t.Fatalf("mcpctl approvals show exit %d:\n%s", code, out)
	}
	if code, out := s.approvalsCtl("approve", id); code != 0 || !strings.Contains(out, "approved "+id) {
		t.Fatalf("mcpctl approvals approve exit %d:\n%s", code, out)
	}

	t.Run("approved: runs once as a job", func(t *testing.T) {
		s.T = t
		te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, call, nil)
		if te == nil || te.ApprovalID != id || te.ApprovalStatus != mcpwire.ApprovalApproved || te.JobID == "" {
			t.Fatalf("the call after approval: %+v, want the approved job", te)
		}
		end := s.waitJob(alice, te.JobID)
		if end.Mode != mcpwire.JobModeSystemd || end.State != mcpwire.JobExited || end.ExitCode == nil || *end.ExitCode != 0 {
			t.Fatalf("the approved job: %+v", end)
		}
		if got := string(s.allOutput(alice, te.JobID, "stdout")); got != "ran-once\n" {
			t.Fatalf("the approved job's output %q", got)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the approved command did not run: %v", err)
		}
		if code, out := s.approvalsCtl("show", id); code != 0 || !strings.Contains(out, "job:       "+te.JobID) {
			t.Fatalf("mcpctl approvals show does not name the job (exit %d):\n%s", code, out)
		}
	})

	t.Run("replayed: runs nothing", func(t *testing.T) {
		s.T = t
		if err := os.Remove(marker); err != nil {
			t.Fatal(err)
		}
		te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, call, nil)
		if te == nil || te.Code != mcpwire.CodePermissionDenied || te.ApprovalID != id || !strings.Contains(te.Message, "used already") {
			t.Fatalf("the call sent again: %+v, want a refusal naming the used approval", te)
		}
		if code, out := s.approvalsCtl("approve", id); code == 0 {
			t.Fatalf("approving a used approval again succeeded:\n%s", out)
		}
		var jl mcpwire.JobList
		s.job(alice, mcpwire.ToolJobList, map[string]any{}, &jl)
		if jl.Total != 1 {
			t.Fatalf("alice has %d jobs, want only the approved one: %+v", jl.Total, jl)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("the replay ran the command (%v)", err)
		}
	})

	t.Run("expired: runs nothing", func(t *testing.T) {
		s.T = t
		s.writePolicy(1000)
		s.restartBackend()
		late := map[string]any{"command": fmt.Sprintf("touch %s-late && echo late", marker)}
		te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, late, nil)
		if te == nil || te.ApprovalStatus != mcpwire.ApprovalPending {
			t.Fatalf("the late call: %+v, want a pending approval", te)
		}
		// Past its expiry (1 s) by the wall clock the store judges by.
		exp := time.Now().Add(1500 * time.Millisecond)
		time.Sleep(time.Until(exp))
		if code, out := s.approvalsCtl("approve", te.ApprovalID); code == 0 || !strings.Contains(out, "expired") {
			t.Fatalf("approving an expired approval: exit %d:\n%s", code, out)
		}
		again := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, late, nil)
		if again == nil || again.Code != mcpwire.CodeNeedsApproval || again.ApprovalStatus != mcpwire.ApprovalPending || again.ApprovalID == te.ApprovalID {
			t.Fatalf("the late call sent again: %+v, want a new pending approval", again)
		}
		var jl mcpwire.JobList
		s.job(alice, mcpwire.ToolJobList, map[string]any{}, &jl)
		if jl.Total != 1 {
			t.Fatalf("alice has %d jobs after the expired approval, want 1", jl.Total)
		}
		if _, err := os.Stat(marker + "-late"); !os.IsNotExist(err) {
			t.Fatalf("the expired call ran (%v)", err)
		}
	})
}
