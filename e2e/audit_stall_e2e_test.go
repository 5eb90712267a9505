package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// journaldPID is the container's journald.
func (s *site) journaldPID(ctx context.Context) string {
	s.T.Helper()
	pid, err := s.M.Exec(ctx, "systemctl", "show", "-P", "MainPID", "systemd-journald.service")
	if err != nil || strings.TrimSpace(pid) == "0" {
		s.T.Fatalf("journald's pid: %q %v", pid, err)
	}
	return strings.TrimSpace(pid)
}

// TestAuditWhenJournaldStalls: journald frozen (SIGSTOP) inside the
// container, the backend installed under real systemd with the journal as
// its audit sink and audit.onFailure refuse.
//
// First a stall the buffer holds: calls made during it reach the journal
// only once it goes on, stamped then, yet `mcpctl audit --since --until`
// over the stall finds every one of them, by the call's own time
// (MCP_CALL_TIME).
//
// Then a stall long enough to lose records: normal work is refused
// UNAVAILABLE, retryable, naming the audit trail, while a control tool
// still runs; once journald goes on, normal work runs again with no
// restart, and the refusals are in the journal (MCP_REASON=audit).
func TestAuditWhenJournaldStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := newSite(t, 60*time.Second)
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen,
		"audit": map[string]any{"bufferRecords": 64, "onFailure": "refuse"}})
	s.restartBackend()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const alice = "alice"
	shell := map[string]any{"command": "true"}

	t.Run("calls made during a stall are in its window", func(t *testing.T) {
		s.T = t
		pid := s.journaldPID(ctx)
		since := time.Now().UTC()
		if out, err := s.M.Exec(ctx, "kill", "-STOP", pid); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		defer s.M.Exec(context.Background(), "kill", "-CONT", pid)
		const n = 12
		for i := range n {
			if te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, shell, nil); te != nil {
				t.Fatalf("call %d during the stall: %+v", i, te)
			}
		}
		until := time.Now().UTC()
		time.Sleep(2 * time.Second) // the stall goes on past the window
		if out, err := s.M.Exec(ctx, "kill", "-CONT", pid); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var recs []map[string]string
		proctest.Eventually(t, "the stall's records in the journal", func() bool {
			recs = journalRecords(t, ctx, s.M, "MESSAGE_ID="+audit.MsgCallEnd, "MCP_TOOL=shell.exec", "--since", "@"+strconv.FormatInt(since.Unix(), 10))
			return len(recs) >= n
		})
		late := 0
		for _, r := range recs {
			if us, err := strconv.ParseInt(r["__REALTIME_TIMESTAMP"], 10, 64); err == nil && time.UnixMicro(us).After(until) {
				late++
			}
		}
		if late == 0 {
			t.Fatalf("no record reached the journal after the window: the stall delayed nothing, so this tests nothing")
		}
		byReceipt := journalRecords(t, ctx, s.M, "MESSAGE_ID="+audit.MsgCallEnd, "MCP_TOOL=shell.exec",
			"--since", "@"+strconv.FormatInt(since.Unix(), 10), "--until", "@"+strconv.FormatInt(until.Unix()+1, 10))
		t.Logf("figures: %d of %d end records reached the journal after the window's end; journalctl --since/--until over the window finds %d", late, len(recs), len(byReceipt))
		code, out := s.Run("audit", "--since", since.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano), "--tool", "shell.exec", "--json")
		if code != 0 {
			t.Fatalf("mcpctl audit: exit %d\n%s", code, out)
		}
		var got struct{ Calls []audit.Call }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ended := 0
		for _, c := range got.Calls {
			if c.Ended && c.Outcome == "ok" && !c.Time.Before(since) && !c.Time.After(until) {
				ended++
			}
		}
		if len(got.Calls) != n || ended != n {
			t.Errorf("mcpctl audit over the stall: %d calls (%d ended ok in the window), want the %d made in it:\n%s", len(got.Calls), ended, n, out)
		}
	})

	t.Run("onFailure refuse: normal work refused while records are lost", func(t *testing.T) {
		s.T = t
		pid := s.journaldPID(ctx)
		if out, err := s.M.Exec(ctx, "kill", "-STOP", pid); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		defer s.M.Exec(context.Background(), "kill", "-CONT", pid)
		var refused *mcpwire.ToolError
		calls := 0
		for ; calls < 5000 && refused == nil; calls++ {
			if te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, shell, nil); te != nil {
				refused = te
			}
		}
		if refused == nil || refused.Code != mcpwire.CodeUnavailable || !refused.Retryable || !strings.Contains(refused.Message, "audit records cannot be written") {
			t.Fatalf("after %d calls with journald stopped: %+v, want UNAVAILABLE, retryable, naming the audit trail", calls, refused)
		}
		t.Logf("figures: refused after %d calls with journald stopped: %s", calls, refused.Message)
		if te := toolCall(t, s.Backend, alice, mcpwire.ToolSystemInfo, map[string]any{}, nil); te != nil {
			t.Errorf("system.info while refusing: %+v, want it to run (a control tool)", te)
		}
		if te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, shell, nil); te == nil || te.Code != mcpwire.CodeUnavailable {
			t.Errorf("shell.exec again while refusing: %+v, want UNAVAILABLE", te)
		}
		if out, err := s.M.Exec(ctx, "kill", "-CONT", pid); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		proctest.Eventually(t, "normal work runs again", func() bool {
			return toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, shell, nil) == nil
		})
		// Both refusals made while journald was stopped are counted in
		// the trail after it (a refusal record lost in the outage hands
		// its counts to the next window).
		counted := 0
		proctest.Eventually(t, "the refusals of the outage in the journal", func() bool {
			counted = 0
			for _, r := range journalRecords(t, ctx, s.M, "MESSAGE_ID="+audit.MsgRefused, "MCP_REASON=audit") {
				n, _ := strconv.Atoi(r[audit.FieldCount])
				counted += n
			}
			return counted >= 2
		})
		t.Logf("figures: %d refusals for the audit trail counted in the journal", counted)
	})
}
