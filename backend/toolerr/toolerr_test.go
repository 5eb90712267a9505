package toolerr

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// An error result carries the envelope as text and in _meta, and no
// structuredContent (clients validate that against the outputSchema).
func TestResultShape(t *testing.T) {
	r := Result(New(mcpwire.CodeOverloaded, "queue full (%d)", 64))
	if !r.IsError || r.StructuredContent != nil || len(r.Content) != 1 {
		t.Fatalf("result %+v", r)
	}
	wire, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		StructuredContent json.RawMessage            `json:"structuredContent"`
		Meta              map[string]json.RawMessage `json:"_meta"`
		Content           []struct{ Text string }    `json:"content"`
	}
	if err := json.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"error":{"code":"OVERLOADED","message":"queue full (64)","retryable":true}}`
	if got.StructuredContent != nil || string(got.Meta[mcpwire.ErrorMetaKey]) != want || got.Content[0].Text != want {
		t.Fatalf("on the wire: %s", wire)
	}
}

func TestFromResult(t *testing.T) {
	env := `{"error":{"code":"NOT_FOUND","message":"m","retryable":false}}`
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want mcpwire.Code
	}{
		{"rendered by Result", Result(New(mcpwire.CodeCancelled, "c")), mcpwire.CodeCancelled},
		{"meta only", &mcp.CallToolResult{IsError: true, Meta: mcp.Meta{mcpwire.ErrorMetaKey: json.RawMessage(env)}}, mcpwire.CodeNotFound},
		{"text only", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: env}}}, mcpwire.CodeNotFound},
		{"decoded meta (a map, as a client sees it)", &mcp.CallToolResult{IsError: true, Meta: mcp.Meta{mcpwire.ErrorMetaKey: map[string]any{
			"error": map[string]any{"code": "TIMEOUT", "message": "t", "retryable": true}}}}, mcpwire.CodeTimeout},
		{"success", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: env}}}, ""},
		{"plain text error", &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "boom"}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got mcpwire.Code
			if e := FromResult(tc.res); e != nil {
				got = e.Code
			}
			if got != tc.want {
				t.Fatalf("code %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMessagesQuoteBoundedArguments: a huge argument is quoted up to
// MaxQuoted bytes with a marker saying how much was cut, a whole message
// stays within MaxMessage, and short arguments pass unchanged.
func TestMessagesQuoteBoundedArguments(t *testing.T) {
	huge := strings.Repeat("é", 2*MaxQuoted) // 2 bytes a rune: cuts must land on rune boundaries
	tests := []struct {
		name string
		e    *Error
		want string // the message, or its prefix when cut
		max  int
	}{
		{"short argument unchanged", New(mcpwire.CodeInvalidArgument, "argument %q: bad", "path"), `argument "path": bad`, 64},
		{"string cut with a marker", New(mcpwire.CodeInvalidArgument, "got %q", huge), `got "` + huge[:MaxQuoted] + `...(` + strconv.Itoa(len(huge)-MaxQuoted) + ` more bytes)"`, MaxQuoted + 64},
		{"error text cut", New(mcpwire.CodeInternal, "%v", errors.New(huge)), huge[:MaxQuoted] + "...(", MaxQuoted + 64},
		{"bytes cut", New(mcpwire.CodeInternal, "%s", []byte(huge)), huge[:MaxQuoted] + "...(", MaxQuoted + 64},
		{"many arguments: the message is cut", New(mcpwire.CodeInternal, strings.Repeat("%s ", 16), anys(huge, 16)...), huge[:MaxQuoted], MaxMessage + 64},
		{"As cuts", As(errors.New(strings.Repeat("x", 3*MaxMessage))), strings.Repeat("x", MaxMessage) + "...(", MaxMessage + 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.HasPrefix(tc.e.Message, tc.want) || len(tc.e.Message) > tc.max || !utf8.ValidString(tc.e.Message) {
				t.Fatalf("message (%d bytes) %.200q, want prefix %.200q within %d", len(tc.e.Message), tc.e.Message, tc.want, tc.max)
			}
		})
	}
	t.Run("Result cuts an Error built without New", func(t *testing.T) {
		r := Result(&Error{Code: mcpwire.CodeInternal, Message: strings.Repeat("y", 10*MaxMessage)})
		if e := FromResult(r); e == nil || len(e.Message) > MaxMessage+64 || e.Code != mcpwire.CodeInternal {
			t.Fatalf("result %+v", e)
		}
	})
}

func anys(s string, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = s
	}
	return out
}
