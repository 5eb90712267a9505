// Package toolerr defines the structured tool failures of DESIGN.md §3: every
// failure of a tool is an MCP tool result with isError and
// {"error":{"code","message","retryable"}}, never a transport error.
package toolerr

import (
	"encoding/json"

	"errors"
	"fmt"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Code is one of the adapter-compatible error codes.
type Code string

// The codes operators and adapters rely on. Keep them exactly.
const (
	InvalidArgument  Code = "INVALID_ARGUMENT"
	NotFound         Code = "NOT_FOUND"
	PermissionDenied Code = "PERMISSION_DENIED"
	Timeout          Code = "TIMEOUT"
	OutputLimit      Code = "OUTPUT_LIMIT"
	Unavailable      Code = "UNAVAILABLE"
	Internal         Code = "INTERNAL"
	Overloaded       Code = "OVERLOADED"
	Cancelled        Code = "CANCELLED"
)

// Error is a tool failure with its code.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// New returns an *Error; OVERLOADED, UNAVAILABLE and TIMEOUT are retryable.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: retryable(code)}
}

func retryable(c Code) bool {
	switch c {
	case Overloaded, Unavailable, Timeout:
		return true
	}
	return false
}

// As returns the *Error inside err, or an INTERNAL one wrapping err.
func As(err error) *Error {
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	return &Error{Code: Internal, Message: err.Error()}
}

// Envelope is the structuredContent of a failed tool call.
type Envelope struct {
	Error *Error `json:"error"`
}

// Result renders e as an MCP tool result: isError, the envelope as
// structuredContent and the same JSON as text content.
func Result(e *Error) *mcp.CallToolResult {
	b, err := json.Marshal(Envelope{Error: e})
	if err != nil { // cannot happen for strings and bools
		b = []byte(`{"error":{"code":"INTERNAL","message":"encoding error","retryable":false}}`)
	}
	return &mcp.CallToolResult{
		IsError:           true,
		StructuredContent: json.RawMessage(b),
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
	}
}
