// Package audittest holds what tests of the audit trail share, whichever
// sink the records were read back from (the file sink's JSON lines, the
// journal's `journalctl -o json`).
package audittest

import (
	"testing"

	"github.com/overdeck/mcp-backend/audit"
)

// CallPairs checks that every start record has exactly one end record of
// the same call, tool and principal, and that no end record lacks its
// start; it returns the start and end records by call id. Records of other
// events are passed over.
func CallPairs(t testing.TB, recs []map[string]string) (starts, ends map[string]map[string]string) {
	t.Helper()
	starts, ends = map[string]map[string]string{}, map[string]map[string]string{}
	for _, r := range recs {
		id := r[audit.FieldCallID]
		switch r[audit.FieldMessageID] {
		case audit.MsgCallStart:
			if starts[id] != nil {
				t.Errorf("call %s has two start records", id)
			}
			starts[id] = r
		case audit.MsgCallEnd:
			if ends[id] != nil {
				t.Errorf("call %s has two end records", id)
			}
			ends[id] = r
		}
	}
	for id, s := range starts {
		e := ends[id]
		if e == nil {
			t.Errorf("call %s (%s) has no end record", id, s[audit.FieldTool])
			continue
		}
		if e[audit.FieldTool] != s[audit.FieldTool] || e[audit.FieldPrincipal] != s[audit.FieldPrincipal] {
			t.Errorf("call %s: end %v does not match start %v", id, e, s)
		}
	}
	for id := range ends {
		if starts[id] == nil {
			t.Errorf("call %s has an end record and no start", id)
		}
	}
	return starts, ends
}
