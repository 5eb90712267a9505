package tools

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

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
	wireGolden(t, "shell-exec-result.golden.json", append(text, '\n'))

	for _, d := range h.tools.defs {
		if d.tool.Name != mcpwire.ToolShellExec {
			continue
		}
		schema, err := json.MarshalIndent(d.tool.OutputSchema, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		wireGolden(t, "shell-exec-output-schema.golden.json", append(schema, '\n'))
		return
	}
	t.Fatalf("no tool %s", mcpwire.ToolShellExec)
}

func wireGolden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file (a contract changed; -update only if that is intended):\ngot:  %s\nwant: %s", name, got, want)
	}
}
