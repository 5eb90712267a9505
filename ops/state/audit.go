package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/audit"
)

// Audit actions. Others are accepted; these are the ones mcpctl status
// knows how to highlight.
const (
	ActionInstall        = "install"
	ActionCanary         = "canary"
	ActionStress         = "stress"
	ActionSnapshot       = "snapshot"
	ActionSnapshotPrune  = "snapshot-prune"
	ActionArmed          = "armed"
	ActionCutover        = "cutover"
	ActionVerified       = "verified"
	ActionDisarmed       = "disarmed"
	ActionRolledBack     = "rolled-back"
	ActionRollbackFailed = "rollback-failed"
	ActionWatchdog       = "watchdog-restart"
	// ActionRecover is production started again after it failed for good
	// (a crash loop hit the start limit): by the watchdog or mcpctl recover.
	ActionRecover = "recover"
)

// Outcomes.
const (
	OutcomeOK      = "ok"
	OutcomeFailed  = "failed"
	OutcomeRefused = "refused"
	OutcomeNoop    = "noop"
)

// Event is one decision in the audit record.
type Event struct {
	Time        time.Time         `json:"time"`
	Action      string            `json:"action"`
	FromVersion string            `json:"fromVersion,omitempty"`
	ToVersion   string            `json:"toVersion,omitempty"`
	SnapshotID  string            `json:"snapshotId,omitempty"`
	Outcome     string            `json:"outcome,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Details     map[string]string `json:"details,omitempty"`
	PID         int               `json:"pid,omitempty"`
}

// Audit appends e to <stateDir>/audit.jsonl (O_APPEND, fsync). A zero Time
// is now; PID defaults to this process.
func (d Dir) Audit(e Event) error {
	stateDir := string(d)
	if e.Action == "" {
		return errors.New("audit: action must not be empty")
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	if e.PID == 0 {
		e.PID = os.Getpid()
	}
	if err := appendJSON(stateDir, AuditFile, e); err != nil {
		return err
	}
	// The file survives a volatile journal; the journal copy puts deploys
	// beside the backend's records (journalctl MESSAGE_ID=...). A journal
	// that cannot take it loses only the copy.
	_, _ = audit.SendJournal("mcpctl", audit.DeployRecord(audit.Deploy{Time: e.Time, Action: e.Action, FromVersion: e.FromVersion,
		ToVersion: e.ToVersion, SnapshotID: e.SnapshotID, Outcome: e.Outcome, Reason: e.Reason, Details: e.Details, PID: e.PID}))
	return nil
}

// tailChunk is how much Tail reads per step backwards from the end.
const tailChunk = 64 * 1024

// Tail returns the last n readable events, oldest first, reading the file
// backwards so its length does not matter. Torn lines are skipped.
func (d Dir) Tail(n int) ([]Event, error) {
	stateDir := string(d)
	if n <= 0 {
		return nil, nil
	}
	f, err := os.Open(filepath.Join(stateDir, AuditFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var (
		out  []Event // newest first while collecting
		tail []byte  // bytes after the last newline seen, i.e. a partial line
		off  = st.Size()
	)
	for off > 0 && len(out) < n {
		size := int64(tailChunk)
		if off < size {
			size = off
		}
		off -= size
		buf := make([]byte, size, size+int64(len(tail)))
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: %w", err)
		}
		buf = append(buf, tail...)
		// Every complete line is after the first newline, unless we reached
		// the start of the file.
		lines := bytes.Split(buf, []byte{'\n'})
		first := 1
		if off == 0 {
			first = 0
		}
		tail = lines[0]
		for i := len(lines) - 1; i >= first && len(out) < n; i-- {
			if e, ok := parseEvent(lines[i]); ok {
				out = append(out, e)
			}
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func parseEvent(line []byte) (Event, bool) {
	var e Event
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &e) != nil || e.Action == "" {
		return e, false
	}
	return e, true
}
