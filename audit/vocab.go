// Package audit holds the one audit vocabulary of the module, the journal
// field names and MESSAGE_IDs that mcp-backend's tool-call records and
// mcpctl's deploy events share, and the sinks that carry records: the
// systemd journal over its native socket protocol, or a JSON-lines file
// with rotation holding the same fields. A Log buffers records so a slow
// or absent journal never blocks the caller, counts what it could not
// write, and says so on the next record that succeeds.
//
// Values are never secrets: no token, no file.write content (its size and
// sha256 instead), no environment variable value (its name instead), no raw
// session id (the caller package hashes conversations).
package audit

// MESSAGE_IDs: `journalctl MESSAGE_ID=<id>` selects one kind of record.
// They never change; a new kind of record gets a new id.
const (
	// MsgCallStart is written after admission, before the tool acts.
	MsgCallStart = "fd88676feef14e258a69165b687e1d7a"
	// MsgCallEnd is written after the tool returned, with the outcome.
	MsgCallEnd = "9d30f54ec0a74ff8b47e181274285485"
	// MsgRefused aggregates refusals (401, 403, OVERLOADED, cancelled
	// while queued) of one flow over one second, with the exact count.
	MsgRefused = "519dbc8eb60f473b966598e1feb21a68"
	// MsgProcess is the backend starting or stopping.
	MsgProcess = "827a99c466ba4cbd96b80e70201d01d1"
	// MsgDeploy is one of mcpctl's deploy events (install, canary,
	// cutover, rollback, ...), the same event as in its audit.jsonl.
	MsgDeploy = "1410a75d763043cba8af43a6ba76ae50"
	// MsgJobEnd is a job's end (exited, killed, lost, ...), written once by
	// the first backend process that sees it, even one started after.
	MsgJobEnd = "3f0c4b7e2a5d49e1b6c8d07f91a2e354"
	// MsgPolicy is a policy decision that did not simply let a call run
	// (ask, deny) and every answer to an ask: who decided, how.
	MsgPolicy = "6b1e2d0c9a8f4f37a5e4c3d2b1a09f8e"
)

// Field names. Journal fields are upper case; the JSON-lines file uses the
// same names as keys. Every value is a string in the journal.
const (
	FieldMessageID = "MESSAGE_ID"
	FieldMessage   = "MESSAGE"
	FieldPriority  = "PRIORITY"
	// FieldTime is the record's own time (RFC 3339, UTC, nanoseconds):
	// when what it tells happened, in both sinks. The journal's
	// __REALTIME_TIMESTAMP (and _SOURCE_REALTIME_TIMESTAMP, which journald
	// alone sets) is when the record reached it: later while journald
	// stalls and records wait in the Log's buffer.
	FieldTime = "TIME"
	// FieldCallTime is when a call started (FieldTime's format), on each
	// of its records (call.start and call.end): the time `mcpctl audit
	// --since/--until` select on.
	FieldCallTime = "MCP_CALL_TIME"
	// SYSLOG_IDENTIFIER is the program (mcp-backend, mcpctl).
	FieldIdentifier = "SYSLOG_IDENTIFIER"

	// FieldEvent names the record within its MESSAGE_ID: call.start,
	// call.end, refused, process.start, process.stop, deploy.
	FieldEvent = "MCP_EVENT"
	// FieldLost is how many records before this one could not be written
	// (buffer full, journal unreachable); absent when none were lost.
	FieldLost = "MCP_AUDIT_LOST"

	// Who and through what.
	FieldCallID           = "MCP_CALL_ID"
	FieldPrincipalKind    = "MCP_PRINCIPAL_KIND" // operator, oauth, asserted, anonymous
	FieldPrincipal        = "MCP_PRINCIPAL"      // the principal's id within its kind, raw (never a secret)
	FieldPrincipalHash    = "MCP_PRINCIPAL_HASH" // its pseudonym, as /metrics and log lines name it (keyed hash)
	FieldClientID         = "MCP_CLIENT_ID"      // the OAuth client, raw
	FieldConversation     = "MCP_CONVERSATION"   // a pseudonym (keyed hash); never the raw session id
	FieldConversationFrom = "MCP_CONVERSATION_FROM"
	FieldHost             = "MCP_HOST"      // the Host the request named: which tunnel it came through
	FieldRole             = "MCP_ROLE"      // production or canary
	FieldTransport        = "MCP_TRANSPORT" // http or stdio

	// What.
	FieldTool          = "MCP_TOOL"
	FieldClass         = "MCP_CLASS"
	FieldArgs          = "MCP_ARGS"           // bounded JSON of the arguments, secrets replaced
	FieldPath          = "MCP_PATH"           // file.* path, shell.exec cwd
	FieldCommand       = "MCP_COMMAND"        // shell.exec command, cut at CommandBytes
	FieldCommandBytes  = "MCP_COMMAND_BYTES"  // the command's full length
	FieldEnvNames      = "MCP_ENV_NAMES"      // shell.exec env names, space-separated; never values
	FieldContentBytes  = "MCP_CONTENT_BYTES"  // file.write content size (decoded)
	FieldContentSHA256 = "MCP_CONTENT_SHA256" // file.write content sha256 (decoded)
	FieldUnit          = "MCP_UNIT"           // service.* unit
	FieldAction        = "MCP_ACTION"         // service.control action; a deploy event's action
	FieldKillSignal    = "MCP_KILL_SIGNAL"    // process.kill signal as asked
	FieldTargetPID     = "MCP_TARGET_PID"     // process.kill target
	FieldTargetStart   = "MCP_TARGET_START"   // its start time, clock ticks since boot (/proc/PID/stat)
	FieldTargetComm    = "MCP_TARGET_COMM"    // its command name at the time of the call
	FieldJobID         = "MCP_JOB_ID"         // the job a job.* call started or touched; a job.end record's job
	FieldJobState      = "MCP_JOB_STATE"      // a job.end record's state (exited, killed, timed_out, output_limit, lost, ...)

	// Policy decisions (on call.start records and policy.* records).
	FieldPolicyAction = "MCP_POLICY_ACTION" // allow, ask, deny: what the rules decided
	FieldPolicyRule   = "MCP_POLICY_RULE"   // the rule's id, policy.default or policy.opaque
	FieldPolicyReason = "MCP_POLICY_REASON" // the rule's reason, or why a command is opaque
	FieldPolicyTarget = "MCP_POLICY_TARGET" // the command part, path or unit that decided
	FieldApprovedBy   = "MCP_APPROVED_BY"   // an ask's answer: user (elicitation), operator (mcpctl approvals)
	FieldApprovalVia  = "MCP_APPROVAL_VIA"  // elicitation, approval, grant
	FieldApproval     = "MCP_APPROVAL"      // accepted, declined, cancelled, pending, approved, granted, denied, expired, unavailable
	FieldApprovalID   = "MCP_APPROVAL_ID"   // a pending approval's id
	FieldGrantID      = "MCP_GRANT_ID"      // the grant (an approval approved for a while) a call ran under
	// FieldSandbox is on every call.start record: the sandbox profile the
	// call's command runs in (inspect, root, a custom one), none when no
	// sandbox, "" for a tool that runs no command.
	FieldSandbox = "MCP_SANDBOX"

	// Admission and outcome.
	FieldQueuedMs    = "MCP_QUEUED_MS"
	FieldOutcome     = "MCP_OUTCOME" // ok, an error code (OVERLOADED, NOT_FOUND, ...), or a deploy outcome
	FieldExitCode    = "MCP_EXIT_CODE"
	FieldExitSignal  = "MCP_EXIT_SIGNAL"
	FieldDurationMs  = "MCP_DURATION_MS"
	FieldOutputBytes = "MCP_OUTPUT_BYTES"
	FieldTruncated   = "MCP_TRUNCATED"

	// Refusal aggregates.
	FieldStatus      = "MCP_STATUS" // HTTP status of the refusal (401, 403; 200 for a tool-result refusal)
	FieldReason      = "MCP_REASON" // why; never the token
	FieldScope       = "MCP_SCOPE"  // what refused: auth, scope, host, queue-full, queue-timeout, memory, ...
	FieldCount       = "MCP_COUNT"  // exact number of refusals in the window
	FieldWindowStart = "MCP_WINDOW_START"
	FieldWindowMs    = "MCP_WINDOW_MS"

	// The process and deploys.
	FieldVersion      = "MCP_VERSION"
	FieldDigest       = "MCP_DIGEST"
	FieldConfigDigest = "MCP_CONFIG_DIGEST"
	FieldPID          = "MCP_PID"
	FieldFromVersion  = "MCP_FROM_VERSION"
	FieldToVersion    = "MCP_TO_VERSION"
	FieldSnapshot     = "MCP_SNAPSHOT"
	FieldDetails      = "MCP_DETAILS" // a deploy event's details, JSON
)

// Events (FieldEvent values).
const (
	EventCallStart    = "call.start"
	EventCallEnd      = "call.end"
	EventRefused      = "refused"
	EventProcessStart = "process.start"
	EventProcessStop  = "process.stop"
	EventDeploy       = "deploy"
	EventJobEnd       = "job.end"
	// EventPolicy is a policy decision (ask, deny) or an ask's answer.
	EventPolicy = "policy.decision"
)

// MessageID returns the MESSAGE_ID of an event.
func MessageID(event string) string {
	switch event {
	case EventCallStart:
		return MsgCallStart
	case EventCallEnd:
		return MsgCallEnd
	case EventRefused:
		return MsgRefused
	case EventProcessStart, EventProcessStop:
		return MsgProcess
	case EventDeploy:
		return MsgDeploy
	case EventJobEnd:
		return MsgJobEnd
	case EventPolicy:
		return MsgPolicy
	}
	return ""
}

// Roles (FieldRole values), from the unit's MCP_BACKEND_ROLE.
const (
	RoleProduction = "production"
	RoleCanary     = "canary"
	// RoleEnv is the environment variable the units set.
	RoleEnv = "MCP_BACKEND_ROLE"
)

// Bounds of what one record holds.
const (
	// CommandBytes is where a shell.exec command is cut; FieldCommandBytes
	// keeps the full length.
	CommandBytes = 1024
	// ArgsBytes bounds FieldArgs.
	ArgsBytes = 2048
	// ValueBytes bounds any other string value.
	ValueBytes = 512
	// FieldBytes bounds every value of every record, whatever wrote it:
	// the bounds above are each field's, this one is the sink's.
	FieldBytes = 4096
	// MessageBytes bounds a record's MESSAGE.
	MessageBytes = 1024
)
