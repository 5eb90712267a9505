package toolerr

import (
	"encoding/json"
	"testing"

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
