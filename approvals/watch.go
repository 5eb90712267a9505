package approvals

import (
	"slices"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Events of a followed store (mcpctl approvals watch, the notifier).
const (
	EventPending  = "pending"  // a new approval waits for the operator
	EventApproved = "approved" // approved: its call runs once when sent again
	EventGranted  = "granted"  // approved for a while (a grant)
	EventDenied   = "denied"
	EventExpired  = "expired" // nobody decided in time, an approved call did not come back, or a grant ended
	EventRevoked  = "revoked" // a grant ended early
	EventRan      = "ran"     // its call was taken to run (JobID when a job)
)

// Event is one change of an approval, with the approval as it is then.
type Event struct {
	Event string    `json:"event"`
	At    time.Time `json:"at"`
	Record
}

// Seen is what a follower knows of each approval: its last state.
type Seen map[string]seenState

type seenState struct {
	status  string
	ran     bool
	revoked bool
}

func stateOf(r Record) seenState {
	return seenState{status: r.Status, ran: r.Ran, revoked: r.Grant != nil && r.Grant.RevokedAt != nil}
}

// Changes compares a listing with what was seen and returns the events
// between them, in order (each approval's in the order they happened),
// and records the listing in seen. An approval first seen already decided
// reports only what still matters: pending, or a live grant, when initial
// (the follower's first look); everything it passed through otherwise.
func Changes(seen Seen, list []Record, now time.Time, initial bool) []Event {
	var out []Event
	emit := func(ev string, r Record) { out = append(out, Event{Event: ev, At: now.UTC(), Record: r}) }
	for _, r := range list {
		st := stateOf(r)
		old, known := seen[r.ID]
		seen[r.ID] = st
		if known && old == st {
			continue
		}
		if !known {
			if initial {
				if r.Status == mcpwire.ApprovalPending {
					emit(EventPending, r)
				} else if r.Grant != nil && r.Grant.Live {
					emit(EventGranted, r)
				}
				continue
			}
			old = seenState{status: mcpwire.ApprovalPending}
			emit(EventPending, r)
		}
		if old.status == mcpwire.ApprovalPending && r.DecidedAt != nil {
			switch {
			case r.Grant != nil:
				emit(EventGranted, r)
			case r.Status == mcpwire.ApprovalDenied:
				emit(EventDenied, r)
			default:
				emit(EventApproved, r)
			}
		}
		if st.ran && !old.ran {
			emit(EventRan, r)
		}
		if st.revoked && !old.revoked {
			emit(EventRevoked, r)
		} else if r.Status == mcpwire.ApprovalExpired && old.status != mcpwire.ApprovalExpired {
			emit(EventExpired, r)
		}
	}
	// Approvals gone from the store (run, or long over) are forgotten.
	for id := range seen {
		if !slices.ContainsFunc(list, func(r Record) bool { return r.ID == id }) {
			delete(seen, id)
		}
	}
	return out
}
