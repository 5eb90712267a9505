package tools

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/internal/golden"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestShellExecWireGolden pins what clients of shell.exec read: the bytes of
// a result as the server sends them (the text content, which mirrors the
// structured content) and the advertised output schema. The stress and
// mcpctl decode these fields by name, so a rename must show up here.
func TestShellExecWireGolden(t *testing.T) {
	h := newHarness(t, testOptions())
	res := h.call(t, mcpwire.ToolShellExec, map[string]any{"command": "printf out; printf err >&2; exit 3"})
	if res.IsError {
		t.Fatalf("shell.exec failed: %s", res.Content[0].(*mcp.TextContent).Text)
	}
	text := []byte(res.Content[0].(*mcp.TextContent).Text)
	// The duration is the one field that differs from run to run.
	text = regexp.MustCompile(`"durationMs":\d+`).ReplaceAll(text, []byte(`"durationMs":0`))
	golden.Check(t, "shell-exec-result.golden.json", append(text, '\n'))

	for _, d := range h.tools.defs {
		if d.tool.Name != mcpwire.ToolShellExec {
			continue
		}
		schema, err := json.MarshalIndent(d.tool.OutputSchema, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, "shell-exec-output-schema.golden.json", append(schema, '\n'))
		return
	}
	t.Fatalf("no tool %s", mcpwire.ToolShellExec)
}
