package audit

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Deploy is one of mcpctl's deploy events, as its state directory's
// audit.jsonl holds it.
type Deploy struct {
	Time                           time.Time
	Action, FromVersion, ToVersion string
	SnapshotID, Outcome, Reason    string
	Details                        map[string]string
	PID                            int
}

// DeployRecord is the journal record of a deploy event: the same MCP_*
// fields as the backend's records where they mean the same (MCP_OUTCOME,
// MCP_REASON, MCP_VERSION's from/to).
func DeployRecord(d Deploy) Record {
	r := Record{Time: d.Time, Event: EventDeploy, Message: fmt.Sprintf("mcpctl %s: %s", d.Action, d.Outcome)}
	if d.ToVersion != "" {
		r.Message += " (" + d.ToVersion + ")"
	}
	r.Add(FieldAction, d.Action)
	r.Add(FieldFromVersion, d.FromVersion)
	r.Add(FieldToVersion, d.ToVersion)
	r.Add(FieldSnapshot, d.SnapshotID)
	r.Add(FieldOutcome, d.Outcome)
	r.Add(FieldReason, Bound(d.Reason, 4*ValueBytes))
	if len(d.Details) > 0 {
		b, _ := json.Marshal(d.Details)
		r.Add(FieldDetails, Bound(string(b), ArgsBytes))
	}
	if d.PID != 0 {
		r.Add(FieldPID, strconv.Itoa(d.PID))
	}
	return r
}

// SendJournal writes r to the journal at once (no buffer: mcpctl writes a
// few events per run), when the journal's socket answers; it reports
// false when there is no journal to write to.
func SendJournal(ident string, r Record) (bool, error) {
	if !JournalAvailable() {
		return false, nil
	}
	return true, Journal{}.Write(complete(ident, r))
}
