package approvals

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestChanges: a store followed through real files (Create, Decide,
// Grant, Claim, Revoke, the clock past an expiry): each change is one
// event, in order, and nothing is reported twice.
func TestChanges(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	st, err := Open(t.TempDir(), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	mk := func(t *testing.T) string {
		t.Helper()
		r := Record{Approval: mcpwire.Approval{ID: NewID(), Tool: mcpwire.ToolShellExec, Rule: "r", Arguments: json.RawMessage(`{"command":"x"}`),
			CreatedAt: now, ExpiresAt: now.Add(time.Minute)}, Digest: "d"}
		if err := st.Create(r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	must := func(_ any, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := Seen{}
	var ids []string
	for _, tc := range []struct {
		name    string
		initial bool
		do      func(t *testing.T)
		want    []string // event:index into ids
	}{
		{"a pending one at the first look", true, func(t *testing.T) { ids = append(ids, mk(t)) }, []string{"pending:0"}},
		{"nothing changed", false, func(t *testing.T) {}, nil},
		{"approved", false, func(t *testing.T) { must(st.Decide(ids[0], true, "operator")) }, []string{"approved:0"}},
		{"ran", false, func(t *testing.T) { must(st.Claim(ids[0])) }, []string{"ran:0"}},
		{"new and denied between two looks", false, func(t *testing.T) {
			ids = append(ids, mk(t))
			must(st.Decide(ids[1], false, "operator"))
		}, []string{"pending:1", "denied:1"}},
		{"granted, then revoked", false, func(t *testing.T) {
			ids = append(ids, mk(t))
			must(st.Grant(ids[2], time.Hour, "operator"))
		}, []string{"pending:2", "granted:2"}},
		{"revoked", false, func(t *testing.T) { must(st.Revoke(ids[2], "operator")) }, []string{"revoked:2"}},
		{"expired", false, func(t *testing.T) { ids = append(ids, mk(t)) }, []string{"pending:3"}},
		{"the clock past it", false, func(t *testing.T) { now = now.Add(2 * time.Minute) }, []string{"expired:3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.do(t)
			list, err := st.List()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range Changes(seen, list, now, tc.initial) {
				got = append(got, ev.Event+":"+string(rune('0'+slices.Index(ids, ev.ID))))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
		})
	}
}
