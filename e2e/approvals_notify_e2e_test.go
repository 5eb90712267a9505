package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// askIn is a ChatGPT-shaped call (no elicitation; subject and
// conversation in _meta) that the policy asks about: its NEEDS_APPROVAL.
func askIn(t testing.TB, url, subject, conversation, command string) *mcpwire.ToolError {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": mcpwire.ToolShellExec, "arguments": map[string]any{"command": command},
		"_meta": map[string]any{"openai/subject": subject, "openai/session": conversation}}})
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := (&http.Client{Timeout: 70 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		} `json:"result"`
	}
	var env mcpwire.ErrorEnvelope
	if json.Unmarshal(b, &r) != nil || !r.Result.IsError || len(r.Result.Content) != 1 ||
		json.Unmarshal([]byte(r.Result.Content[0].Text), &env) != nil || env.Error == nil {
		t.Fatalf("%q: status %d: %.400s", command, resp.StatusCode, b)
	}
	return env.Error
}

// notified counts the approvals the notifier read, by id.
func notified(t testing.TB, file string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var n struct {
			ID      string `json:"id"`
			Approve string `json:"approve"`
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		if err := json.Unmarshal([]byte(l), &n); err != nil || n.Approve != "mcpctl approvals approve "+n.ID {
			t.Fatalf("the notifier read %q (%v), want an approval's JSON with its approve line", l, err)
		}
		out[n.ID]++
	}
	return out
}

// TestApprovalsNotifierInSystemd: approvals.notify under real systemd,
// installed by mcpctl unit install (its path unit on the backend's state
// directory, its oneshot service, its timer), with a notifier that appends
// what it reads to a file. A ChatGPT-shaped call's NEEDS_APPROVAL says the
// operator has been notified and reaches the notifier once (the delay is
// logged); 20 asks from 5 conversations, a cutover in the middle, give 20
// notifications, none twice; a notifier that exits 1 or sleeps past its
// timeout leaves the backend answering, is tried 1+retries times and given
// up (the service failed, logged).
func TestApprovalsNotifierInSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := policySite(t, 15*60*1000)
	out := filepath.Join(s.Dir, "notified.jsonl")
	attempts := filepath.Join(s.Dir, "attempts")
	install := func(t *testing.T, script, timeout string, retries int) {
		t.Helper()
		s.Cfg.Approvals.Notify = ctlconfig.Notify{Command: "/bin/sh", Args: []string{"-c", script}, Retries: retries}
		d, err := time.ParseDuration(timeout)
		if err != nil {
			t.Fatal(err)
		}
		s.Cfg.Approvals.Notify.Timeout = ctlconfig.Duration(d)
		nspawntest.WriteJSON(t, s.CfgPath, s.Cfg)
		if code, text := s.Run("unit", "install"); code != 0 || !strings.Contains(text, "approvals notifier: "+units.NotifyPath) {
			t.Fatalf("unit install: exit %d:\n%s", code, text)
		}
		for _, u := range []string{units.NotifyPath, units.NotifyTimer} {
			if active, _ := s.Unit(u); active != "active" {
				t.Fatalf("%s is %s after unit install, want active", u, active)
			}
		}
	}
	install(t, `cat >> `+out+`; echo >> `+out, "10s", 2)

	t.Run("one ask reaches the notifier once", func(t *testing.T) {
		s.T = t
		te := askIn(t, s.Backend, "alice", "first", "touch "+filepath.Join(s.Dir, "first"))
		asked := time.Now()
		if te.Code != mcpwire.CodeNeedsApproval || te.ApprovalID == "" || !strings.Contains(te.Message, "The operator has been notified of approval "+te.ApprovalID) {
			t.Fatalf("NEEDS_APPROVAL: %+v", te)
		}
		proctest.Eventually(t, "the notifier to read the approval", func() bool { return notified(t, out)[te.ApprovalID] > 0 })
		t.Logf("delay from NEEDS_APPROVAL to the notifier's append: %s", time.Since(asked).Round(time.Millisecond))
		if n := notified(t, out)[te.ApprovalID]; n != 1 {
			t.Fatalf("notified %d times", n)
		}
	})

	t.Run("20 asks from 5 conversations across a cutover", func(t *testing.T) {
		s.T = t
		var ids []string
		ask := func(i int) {
			te := askIn(t, s.Backend, "alice", fmt.Sprintf("conv-%d", i%5), fmt.Sprintf("touch %s/many-%d", s.Dir, i))
			if te.Code != mcpwire.CodeNeedsApproval || te.ApprovalStatus != mcpwire.ApprovalPending {
				t.Fatalf("ask %d: %+v", i, te)
			}
			ids = append(ids, te.ApprovalID)
		}
		for i := 0; i < 10; i++ {
			ask(i)
		}
		s.Pass(s.Builds["v2"])
		if code, text := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback"); code != 0 || s.Version() != "v2" {
			t.Fatalf("cutover: exit %d:\n%s", code, text)
		}
		for i := 10; i < 20; i++ {
			ask(i)
		}
		proctest.Eventually(t, "20 notifications", func() bool {
			got := notified(t, out)
			for _, id := range ids {
				if got[id] == 0 {
					return false
				}
			}
			return true
		})
		got := notified(t, out)
		total := 0
		for id, n := range got {
			total += n
			if n != 1 {
				t.Errorf("approval %s notified %d times", id, n)
			}
		}
		if total != 21 {
			t.Fatalf("%d notifications, want 21 (the first and these 20): %v", total, got)
		}
		if code, text := s.Run("rollback", "--last"); code != 0 {
			t.Fatalf("rollback: exit %d:\n%s", code, text)
		}
	})

	for i, tc := range []struct {
		name, script, timeout string
	}{
		{"a notifier that exits 1", `cat > /dev/null; echo x >> ` + attempts + `; exit 1`, "10s"},
		{"a notifier that sleeps past its timeout", `echo x >> ` + attempts + `; exec sleep 600`, "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.T = t
			_ = os.Remove(attempts)
			install(t, tc.script, tc.timeout, 1)
			start := time.Now()
			te := askIn(t, s.Backend, "bob", tc.name, fmt.Sprintf("touch %s/bob-%d", s.Dir, i))
			if te.Code != mcpwire.CodeNeedsApproval {
				t.Fatalf("NEEDS_APPROVAL: %+v", te)
			}
			// The backend answers as ever while the notifier fails.
			var info map[string]any
			if e := toolCall(t, s.Backend, "bob", mcpwire.ToolSystemInfo, map[string]any{}, &info); e != nil {
				t.Fatalf("system.info while the notifier fails: %+v", e)
			}
			marker := filepath.Join(s.Cfg.StateDir, "approvals-notified", te.ApprovalID)
			proctest.Eventually(t, "the notifier to give up", func() bool {
				b, err := os.ReadFile(marker)
				return err == nil && strings.Contains(string(b), `"ok":false`)
			})
			t.Logf("given up after %s", time.Since(start).Round(time.Millisecond))
			proctest.Eventually(t, "the notifier's service to show the failure", func() bool {
				active, _ := s.Unit(units.NotifyService)
				return active == "failed"
			})
			b, _ := os.ReadFile(attempts)
			// Every pending approval without a marker is tried: this one
			// twice (1 + retries), none of the earlier ones (notified).
			if n := strings.Count(string(b), "x"); n != 2 {
				t.Fatalf("%d attempts, want 2 (1 + retries 1)", n)
			}
			if e := toolCall(t, s.Backend, "bob", mcpwire.ToolSystemInfo, map[string]any{}, &info); e != nil {
				t.Fatalf("system.info after: %+v", e)
			}
			if strings.Contains(tc.script, "sleep") {
				if got := s.inContainer("sh", "-c", "pgrep -x sleep || true"); strings.TrimSpace(got) != "" {
					t.Fatalf("the timed-out notifier still runs: %s", got)
				}
			}
		})
	}
}
