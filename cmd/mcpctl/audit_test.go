package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/internal/golden"
)

// auditFixture is what journalctl -o json gives for a few calls: records
// in the backend's vocabulary, as the journal stores them.
func auditFixture(t testing.TB) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "audit-journal.json"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := decodeJournal(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestAuditTableGolden(t *testing.T) {
	recs := auditFixture(t)
	for _, c := range []struct{ name, outcome string }{{"audit-table.golden", ""}, {"audit-table-errors.golden", "NOT_FOUND"}} {
		calls, _ := joinCalls(recs, c.outcome)
		var b bytes.Buffer
		renderCalls(&b, calls)
		golden.Check(t, c.name, b.Bytes())
	}
	_, sums := joinCalls(recs, "")
	var b bytes.Buffer
	renderSummary(&b, sums)
	golden.Check(t, "audit-summary.golden", b.Bytes())
}

func TestAuditJournalArgs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	base := []string{"MESSAGE_ID=" + audit.MsgCallStart, "MESSAGE_ID=" + audit.MsgCallEnd, "MESSAGE_ID=" + audit.MsgRefused}
	cases := []struct {
		name string
		q    auditQuery
		want []string // besides -o json --no-pager -q and the MESSAGE_IDs
		err  string
	}{
		{"a duration is relative to now", auditQuery{Since: "1h"}, []string{"--since", "@1799996400"}, ""},
		{"a journalctl time passes as it is", auditQuery{Since: "2026-12-03 10:00"}, []string{"--since", "2026-12-03 10:00"}, ""},
		{"negative duration", auditQuery{Since: "-5m"}, nil, "--since -5m: want a positive duration"},
		{"principal id", auditQuery{Principal: "operator"}, []string{"MCP_PRINCIPAL=operator"}, ""},
		{"kind and id", auditQuery{Principal: "oauth:https://auth.example.com alice"}, []string{"MCP_PRINCIPAL_KIND=oauth", "MCP_PRINCIPAL=https://auth.example.com alice"}, ""},
		{"kind only", auditQuery{Principal: "anonymous:"}, []string{"MCP_PRINCIPAL_KIND=anonymous"}, ""},
		{"conversation and tool", auditQuery{Conversation: "c0ffee", Tool: "shell.exec"}, []string{"MCP_CONVERSATION=c0ffee", "MCP_TOOL=shell.exec"}, ""},
		{"a forwarded journal", auditQuery{Directory: "/srv/journal"}, []string{"--directory", "/srv/journal"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.q.journalArgs(now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range append(slices.Clone(base), c.want...) {
				if !slices.Contains(got, w) {
					t.Errorf("args %q lack %q", got, w)
				}
			}
		})
	}
}

func TestAuditUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"audit", "extra"}, {"audit", "--limit", "-1"}, {"audit", "--since", "-1h"}} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"mcpctl", "--config", "/nonexistent"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}
