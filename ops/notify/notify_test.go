package notify

import (
	"slices"
	"testing"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestToNotify: a pass notifies the pending approvals without a marker,
// oldest first, and forgets the markers of approvals gone from the store.
func TestToNotify(t *testing.T) {
	rec := func(id, status string) approvals.Record {
		return approvals.Record{Approval: mcpwire.Approval{ID: id, Status: status}}
	}
	a, b, c, gone := "a0000000000000001", "a0000000000000002", "a0000000000000003", "a0000000000000009"
	for _, tc := range []struct {
		name       string
		list       []approvals.Record
		marked     []string
		todo, gone []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"new pending ones", []approvals.Record{rec(a, "pending"), rec(b, "pending")}, nil, []string{a, b}, nil},
		{"marked: not again", []approvals.Record{rec(a, "pending"), rec(b, "pending")}, []string{a}, []string{b}, nil},
		{"decided or expired before: never", []approvals.Record{rec(a, "approved"), rec(b, "expired"), rec(c, "denied")}, nil, nil, nil},
		{"markers of approvals gone", []approvals.Record{rec(a, "pending")}, []string{a, gone}, nil, []string{gone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]bool{}
			for _, id := range tc.marked {
				m[id] = true
			}
			todo, stale := toNotify(tc.list, m)
			var ids []string
			for _, r := range todo {
				ids = append(ids, r.ID)
			}
			if !slices.Equal(ids, tc.todo) || !slices.Equal(stale, tc.gone) {
				t.Fatalf("todo %v stale %v, want %v %v", ids, stale, tc.todo, tc.gone)
			}
		})
	}
}
