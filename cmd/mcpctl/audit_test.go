package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

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
	recs, err := audit.DecodeJournal(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestAuditTableGolden(t *testing.T) {
	recs := auditFixture(t)
	for _, c := range []struct{ name, outcome string }{{"audit-table.golden", ""}, {"audit-table-errors.golden", "NOT_FOUND"}} {
		calls, _ := audit.JoinCalls(recs, c.outcome)
		var b bytes.Buffer
		renderCalls(&b, calls)
		golden.Check(t, c.name, b.Bytes())
	}
	_, sums := audit.JoinCalls(recs, "")
	var b bytes.Buffer
	renderSummary(&b, sums)
	golden.Check(t, "audit-summary.golden", b.Bytes())
}

func TestAuditUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"audit", "extra"}, {"audit", "--limit", "-1"}, {"audit", "--since", "-1h"}} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"mcpctl", "--config", "/nonexistent"}, args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}
