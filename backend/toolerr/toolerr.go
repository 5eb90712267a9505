// Package toolerr builds the structured tool failures of mcp-backend: every
// failure of a tool is an MCP tool result with isError and the
// mcpwire.ErrorEnvelope {"error":{"code","message","retryable"}} as JSON
// text, never a transport error.
package toolerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Error is a tool failure with its code: the wire's mcpwire.ToolError as a
// Go error that tool code returns.
type Error mcpwire.ToolError

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Bounds of what a message says, so that an answer stays small whatever a
// call sent: an argument (a string, an error's text, a Stringer) is quoted
// up to MaxQuoted bytes, a whole message up to MaxMessage; what is cut is
// marked "...(N more bytes)". The envelope travels twice in a result (text
// and _meta), and JSON escaping can make each byte six.
const (
	MaxQuoted  = 1024
	MaxMessage = 4096
)

// New returns an *Error; OVERLOADED, UNAVAILABLE and TIMEOUT are retryable.
// String-like arguments are cut to MaxQuoted bytes before formatting, the
// message to MaxMessage.
func New(code mcpwire.Code, format string, args ...any) *Error {
	bounded := make([]any, len(args))
	for i, a := range args {
		bounded[i] = boundArg(a)
	}
	return &Error{Code: code, Message: Cut(fmt.Sprintf(format, bounded...), MaxMessage), Retryable: code.Retryable()}
}

// boundArg cuts a string-like argument to MaxQuoted bytes.
func boundArg(a any) any {
	var s string
	switch v := a.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case error:
		s = v.Error()
	case fmt.Stringer:
		s = v.String()
	default:
		return a
	}
	if len(s) <= MaxQuoted {
		return a
	}
	return Cut(s, MaxQuoted)
}

// Cut returns s when it has at most n bytes, else its first n bytes (on a
// rune boundary) and the marker "...(N more bytes)".
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	k := n
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	return s[:k] + "...(" + strconv.Itoa(len(s)-k) + " more bytes)"
}

// As returns the *Error inside err, or an INTERNAL one wrapping err.
func As(err error) *Error {
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	return &Error{Code: mcpwire.CodeInternal, Message: Cut(err.Error(), MaxMessage)}
}

// Result renders e as an MCP tool result: isError, the envelope as JSON text
// content and in _meta under mcpwire.ErrorMetaKey. It carries no
// structuredContent: clients validate structuredContent against the tool's
// outputSchema even on errors, and an envelope would fail that and surface
// as a protocol error that hides the code.
func Result(e *Error) *mcp.CallToolResult {
	if len(e.Message) > MaxMessage { // built without New
		c := *e
		c.Message = Cut(c.Message, MaxMessage)
		e = &c
	}
	b, err := json.Marshal(mcpwire.ErrorEnvelope{Error: (*mcpwire.ToolError)(e)})
	if err != nil { // cannot happen for strings and bools
		b = []byte(`{"error":{"code":"INTERNAL","message":"encoding error","retryable":false}}`)
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
		Meta:    mcp.Meta{mcpwire.ErrorMetaKey: json.RawMessage(b)},
	}
}

// FromResult returns the failure a tool result carries, read from _meta or,
// failing that, the JSON text content; nil when r is not an error result
// or carries no envelope.
func FromResult(r *mcp.CallToolResult) *Error {
	if r == nil || !r.IsError {
		return nil
	}
	if v, ok := r.Meta[mcpwire.ErrorMetaKey]; ok {
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
	var env mcpwire.ErrorEnvelope
	if json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Code == "" {
		return nil
	}
	return (*Error)(env.Error)
}
