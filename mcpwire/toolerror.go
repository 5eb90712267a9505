package mcpwire

// Code is the code of a failed tool call.
type Code string

// The codes clients branch on. OVERLOADED and CANCELLED are always tool
// results, never HTTP or JSON-RPC errors.
const (
	CodeInvalidArgument  Code = "INVALID_ARGUMENT"
	CodeNotFound         Code = "NOT_FOUND"
	CodePermissionDenied Code = "PERMISSION_DENIED"
	CodeTimeout          Code = "TIMEOUT"
	CodeOutputLimit      Code = "OUTPUT_LIMIT"
	CodeUnavailable      Code = "UNAVAILABLE"
	CodeInternal         Code = "INTERNAL"
	CodeOverloaded       Code = "OVERLOADED"
	CodeCancelled        Code = "CANCELLED"
)

// Retryable says whether a call that failed with c may succeed if sent
// again unchanged: the backend was busy, unavailable for a moment, or the
// command ran out of time.
func (c Code) Retryable() bool {
	switch c {
	case CodeOverloaded, CodeUnavailable, CodeTimeout:
		return true
	}
	return false
}

// ToolError is a tool failure as it travels.
type ToolError struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Scope is whose limit an OVERLOADED call hit: ScopeConversation,
	// ScopePrincipal or ScopeServer.
	Scope string `json:"scope,omitempty"`
	// RetryAfterMs is when a retry may find room, estimated from what the
	// server observes (drain rate, the caller's recent refusals).
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	// ApprovalID, ApprovalStatus and JobID describe the pending approval of
	// a NEEDS_APPROVAL call (and a PERMISSION_DENIED one the operator
	// denied): its id for mcpctl approvals, its status, and once approved
	// the job a command runs as.
	ApprovalID     string `json:"approvalId,omitempty"`
	ApprovalStatus string `json:"approvalStatus,omitempty"`
	JobID          string `json:"jobId,omitempty"`
}

// The scopes of an OVERLOADED error.
const (
	ScopeConversation = "conversation"
	ScopePrincipal    = "principal"
	ScopeServer       = "server"
)

// ErrorEnvelope is the JSON of a failed tool call: {"error":{...}}. It is the
// text content of a result with isError, and sits in the result's _meta
// under ErrorMetaKey.
type ErrorEnvelope struct {
	Error *ToolError `json:"error"`
}

// ErrorMetaKey is the key of the ErrorEnvelope in a failed result's _meta,
// namespaced as MCP asks of _meta keys.
const ErrorMetaKey = "mcp-backend/error"
