package clients

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// inspectorCLI is MCP Inspector's command-line mode.
const inspectorCLI = "node_modules/@modelcontextprotocol/inspector/cli/build/cli.js"

// MCP Inspector's CLI lists the tools and calls one with an integer
// argument, over HTTP and over stdio (through an Inspector server file, as
// its users configure it).
func TestInspectorCLI(t *testing.T) {
	tests := []struct {
		name   string
		server func(t *testing.T) []string // the Inspector arguments naming the server
	}{
		{"http", func(t *testing.T) []string {
			return []string{startHTTP(t, `{}`).url, "--transport", "http"}
		}},
		{"stdio", func(t *testing.T) []string {
			cmd := stdioCommand(t, `{}`)
			servers, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
				"mcp-backend": map[string]any{"command": cmd[0], "args": cmd[1:]}}})
			p := filepath.Join(t.TempDir(), "servers.json")
			if err := os.WriteFile(p, servers, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--config", p, "--server", "mcp-backend"}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			server := tc.server(t)
			inspect := func(args ...string) string {
				t.Helper()
				argv := append([]string{inspectorCLI, "--cli"}, server...)
				out, stderr, err := runNode(t, nil, nil, append(argv, args...)...)
				if err != nil {
					t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out, stderr)
				}
				return out
			}
			var list struct {
				Tools []struct{ Name string } `json:"tools"`
			}
			if out := inspect("--method", "tools/list"); jsonBody(t, out, &list) != nil || len(list.Tools) != len(mcpwire.ToolNames()) {
				t.Fatalf("tools/list: %.1000s", out)
			}
			names := make([]string, 0, len(list.Tools))
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			if !slices.Contains(names, "shell.exec") {
				t.Fatalf("tools/list: %v", names)
			}
			var res struct {
				IsError           bool `json:"isError"`
				StructuredContent struct {
					Stdout   string `json:"stdout"`
					ExitCode *int   `json:"exitCode"`
				} `json:"structuredContent"`
			}
			out := inspect("--method", "tools/call", "--tool-name", "shell.exec", "--tool-arg", "command=echo inspected", "timeoutMs=5000")
			if jsonBody(t, out, &res) != nil || res.IsError || res.StructuredContent.Stdout != "inspected\n" {
				t.Fatalf("tools/call shell.exec: %.1000s", out)
			}
		})
	}
}

// jsonBody decodes the JSON document Inspector prints after its banner.
func jsonBody(t testing.TB, out string, v any) error {
	t.Helper()
	i := strings.Index(out, "{")
	if i < 0 {
		t.Errorf("no JSON in %.500s", out)
		return os.ErrNotExist
	}
	if err := json.Unmarshal([]byte(out[i:]), v); err != nil {
		t.Errorf("%v in %.500s", err, out)
		return err
	}
	return nil
}
