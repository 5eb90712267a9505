package mcpwire

import (
	"encoding/json"
	"time"
)

// CodeNeedsApproval is the code of a call the policy asks about when no
// one could be asked in the client: it waits as a pending approval for the
// operator (mcpctl approvals), named by the envelope's approvalId. Sending
// the same call again reports the approval's status; once approved, a
// command runs as a job (jobId) whose output the job tools read, any other
// call runs when it is sent again.
const CodeNeedsApproval Code = "NEEDS_APPROVAL"

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired"
)

// Approval is one pending (or decided) approval as mcpctl approvals shows
// it (--json) and the backend stores it.
type Approval struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Tool   string `json:"tool"`
	// Target is what the policy asked about: the command part, path or unit.
	Target string `json:"target,omitempty"`
	// Parts are every part of a shell command the policy judged, in order,
	// each with what decided it: what the approval runs is the whole
	// command in Arguments, not only Target.
	Parts  []JudgedPart `json:"parts,omitempty"`
	Rule   string       `json:"rule"`
	Reason string       `json:"reason,omitempty"`
	// Who asked: the principal (kind and id) and the conversation (hashed).
	PrincipalKind string `json:"principalKind"`
	Principal     string `json:"principal"`
	Conversation  string `json:"conversation"`
	// Arguments are the call's arguments, exactly as they will run.
	Arguments json.RawMessage `json:"arguments"`
	CreatedAt time.Time       `json:"createdAt"`
	ExpiresAt time.Time       `json:"expiresAt"`
	DecidedBy string          `json:"decidedBy,omitempty"`
	DecidedAt *time.Time      `json:"decidedAt,omitempty"`
	// JobID is the job an approved command runs as.
	JobID string `json:"jobId,omitempty"`
}

// JudgedPart is one part of a shell command (a simple command, or
// something in the line the policy cannot see through) and what the policy
// decided of it.
type JudgedPart struct {
	// Text is the part as written.
	Text string `json:"text"`
	// Action is allow, ask or deny; "" for a wrapper (sudo, env, nice...)
	// no rule names, whose command is its own part.
	Action string `json:"action,omitempty"`
	// Rule is the rule that decided it (or policy.default, policy.opaque).
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
}
