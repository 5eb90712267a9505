// Package toolerr defines the structured tool failures: every failure of a
// tool is an MCP tool result with isError and the JSON text
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

// MetaKey is the result _meta key that carries the envelope for programs,
// beside the text content that carries it for people and models.
const MetaKey = "mcp-backend/error"

// Envelope is the JSON of a failed tool call.
type Envelope struct {
	Error *Error `json:"error"`
}

// Result renders e as an MCP tool result: isError, the envelope as JSON text
// content and in _meta under MetaKey. It carries no structuredContent:
// clients validate structuredContent against the tool's outputSchema even
// on errors, and an envelope would fail that and surface as a protocol
// error that hides the code.
func Result(e *Error) *mcp.CallToolResult {
	b, err := json.Marshal(Envelope{Error: e})
	if err != nil { // cannot happen for strings and bools
		b = []byte(`{"error":{"code":"INTERNAL","message":"encoding error","retryable":false}}`)
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
		Meta:    mcp.Meta{MetaKey: json.RawMessage(b)},
	}
}

// FromResult returns the failure a tool result carries, read from _meta or,
// failing that, the JSON text content; nil when r is not an error result
// or carries no envelope.
func FromResult(r *mcp.CallToolResult) *Error {
	if r == nil || !r.IsError {
		return nil
	}
	if v, ok := r.Meta[MetaKey]; ok {
		if b, err := json.Marshal(v); err == nil {
			if e := Decode(b); e != nil {
				return e
			}
		}
	}
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			if e := Decode([]byte(t.Text)); e != nil {
				return e
			}
		}
	}
	return nil
}

// Decode parses an envelope; nil when b is not one.
func Decode(b []byte) *Error {
	var env Envelope
	if json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Code == "" {
		return nil
	}
	return env.Error
}
