package mcpwire

import "time"

// Metrics is the JSON of GET /metrics: the admission controller's snapshot.
type Metrics struct {
	Limits   Limits   `json:"limits"`
	Active   Active   `json:"active"`
	Queued   Queued   `json:"queued"`
	Peak     Peak     `json:"peak"`
	Counters Counters `json:"counters"`
	// Service is what the service holds while its limits are shared
	// between processes (absent when they are not).
	Service *ServiceMetrics `json:"service,omitempty"`
	// Flows is the fair-share state: which callers hold and wait for slots.
	Flows *Flows `json:"flows,omitempty"`
	// Jobs is the jobs manager's state (absent from the admission
	// controller's own snapshot; the server fills it).
	Jobs *JobMetrics `json:"jobs,omitempty"`
}

// Flows is the "flows" object of /metrics: the flow table's size and the
// busiest flows. Ids are never shown: a principal is its kind and a hash,
// a conversation its hash.
type Flows struct {
	// Principals and Conversations tracked now; Cap bounds each.
	Principals    int `json:"principals"`
	Conversations int `json:"conversations"`
	Cap           int `json:"cap"`
	// Busy: conversations with an operation running or queued.
	Busy int `json:"busy"`
	// Overflowed counts flows that found the table full and share a bucket.
	Overflowed int64 `json:"overflowed"`
	// Reserve is the per-class reserve no flow may fill alone.
	Reserve int `json:"reserve"`
	// Top are the busiest conversations (running + queued), at most TopFlows.
	Top []FlowStat `json:"top"`
}

// TopFlows is how many flows /metrics lists.
const TopFlows = 5

// FlowStat is one conversation's share of the server.
type FlowStat struct {
	PrincipalKind string `json:"principalKind"`
	Principal     string `json:"principal"` // a hash
	Conversation  string `json:"conversation"`
	Active        int    `json:"active"`
	Queued        int    `json:"queued"`
	Refused       int64  `json:"refused"`
	// ServedSeconds is the slot-seconds held since the flow was last idle
	// long enough to be forgotten.
	ServedSeconds float64 `json:"servedSeconds"`
}

// Idle says nothing holds or waits for a slot.
func (m Metrics) Idle() bool { return m.Active.Total == 0 && m.Queued.Total == 0 }

// Limits are the configured admission limits as reported.
type Limits struct {
	MaxActive       int   `json:"maxActive"`
	ReservedControl int   `json:"reservedControl"`
	MaxNonControl   int   `json:"maxNonControl"`
	MaxShell        int   `json:"maxShell"`
	MaxQueue        int   `json:"maxQueue"`
	QueueWaitMs     int64 `json:"queueWaitMs"`
}

// QueueWait is QueueWaitMs as a duration.
func (l Limits) QueueWait() time.Duration { return time.Duration(l.QueueWaitMs) * time.Millisecond }

// Active counts the running operations (those holding slots).
type Active struct {
	Total      int64 `json:"total"`
	Control    int64 `json:"control"`
	NonControl int64 `json:"nonControl"`
	Shell      int64 `json:"shell"`
}

// Queued counts the waiting operations.
type Queued struct {
	Total      int64 `json:"total"`
	Control    int64 `json:"control"`
	NonControl int64 `json:"nonControl"`
}

// Peak holds the high-water marks since the process started.
type Peak struct {
	Active     int64 `json:"active"`
	NonControl int64 `json:"nonControl"`
	Shell      int64 `json:"shell"`
	Queued     int64 `json:"queued"`
}

// Counters count outcomes since the process started. Accepted: got a slot;
// Completed: released it; Rejected: OVERLOADED because the queue was full;
// TimedOut: OVERLOADED because the queue wait expired; Cancelled: cancelled
// while queued.
type Counters struct {
	Accepted  int64 `json:"accepted"`
	Completed int64 `json:"completed"`
	Rejected  int64 `json:"rejected"`
	TimedOut  int64 `json:"timedOut"`
	Cancelled int64 `json:"cancelled"`
	// Preempted is the part of Rejected that was queued and gave its place
	// to a control operation.
	Preempted int64 `json:"preempted"`
	// Displaced is the part of Rejected that was queued and gave its place
	// to an arrival from a flow holding fewer places (fair share).
	Displaced int64 `json:"displaced"`
}

// Seen is the number of operations admission decided on: each is accepted,
// rejected, timed out or cancelled exactly once.
func (c Counters) Seen() int64 { return c.Accepted + c.Rejected + c.TimedOut + c.Cancelled }

// Sub returns c - o, field by field: what happened between two snapshots.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		Accepted:  c.Accepted - o.Accepted,
		Completed: c.Completed - o.Completed,
		Rejected:  c.Rejected - o.Rejected,
		TimedOut:  c.TimedOut - o.TimedOut,
		Cancelled: c.Cancelled - o.Cancelled,
		Preempted: c.Preempted - o.Preempted,
		Displaced: c.Displaced - o.Displaced,
	}
}

// AuditMetrics is the "audit" object of GET /metrics: the audit trail's
// sink (journal, file or off) and its records written, dropped (buffer
// full or the sink refused them; each loss is also said on the next record
// written) and waiting for the sink.
type AuditMetrics struct {
	Sink    string `json:"sink"`
	Written int64  `json:"written"`
	Dropped int64  `json:"dropped"`
	Pending int64  `json:"pending"`
}

// SandboxMetrics is the "sandbox" object of GET /metrics: the shell
// commands (shell.exec, job.start) that started since the process
// started, per sandbox profile they ran in ("none": no sandbox).
type SandboxMetrics struct {
	Calls map[string]int64 `json:"calls"`
}

// PolicyMetrics is the "policy" object of GET /metrics: whether a policy
// is configured, and its decisions since the process started, per action
// (every call it looked at is counted once in allow, ask or deny), and
// what became of the asks: approved (ran after the user accepted or the
// operator approved) or refused (declined, cancelled, denied, expired);
// an ask still pending is in neither.
type PolicyMetrics struct {
	Enabled  bool  `json:"enabled"`
	Allow    int64 `json:"allow"`
	Ask      int64 `json:"ask"`
	Deny     int64 `json:"deny"`
	Approved int64 `json:"approved"`
	Refused  int64 `json:"refused"`
}

// ServiceMetrics is the "service" object of /metrics, present when the
// process holds its limits together with the other processes serving the
// same socket (the production slots): the limits are the service's, and
// these are its holdings, this process's included.
type ServiceMetrics struct {
	// Processes with a record in the service's ledger, this one included.
	Processes int `json:"processes"`
	// Shared: more than one, so every decision counts the others' holdings.
	Shared bool   `json:"shared"`
	Active Active `json:"active"`
	Queued Queued `json:"queued"`
	// Reclaimed counts records of processes that died holding a share,
	// freed by this one.
	Reclaimed int64 `json:"reclaimed"`
	// Yielded counts the waiters of other processes this one left a slot
	// to (across processes the older waiter starts first).
	Yielded int64 `json:"yielded"`
}
