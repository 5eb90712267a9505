package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/audit/audittest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestPanickingToolIsOneInternalError: a tool whose handler panics answers
// one INTERNAL tool error through the real HTTP handler, the backend keeps
// serving every other call, and the call has one start and one end record
// with that outcome. Both ways a call runs are covered: in a slot (runCall)
// and job.wait's, which holds none. The panic is recovered in one place
// (recovered, drain.go): without it the test binary dies.
func TestPanickingToolIsOneInternalError(t *testing.T) {
	tests := []struct {
		tool string
		args map[string]any
	}{
		{mcpwire.ToolSystemInfo, map[string]any{}},
		{mcpwire.ToolJobWait, map[string]any{"id": "j-panics", "waitMs": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			bk, path := auditBackend(t, nil)
			// The tool's handler as the SDK holds it, replaced by one that
			// panics; everything before and after it is the real pipeline.
			bk.srv.mcp.AddTool(&mcp.Tool{Name: tc.tool, InputSchema: &jsonschema.Schema{Type: "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { panic("boom") })
			host := "127.0.0.1"
			if status, code := auditCall(t, context.Background(), bk.url, host, auditToken, tc.tool, tc.args); status != http.StatusOK || code != string(mcpwire.CodeInternal) {
				t.Fatalf("%s: status %d code %q, want 200 and one %s tool error", tc.tool, status, code, mcpwire.CodeInternal)
			}
			if status, code := auditCall(t, context.Background(), bk.url, host, auditToken, mcpwire.ToolProcessList, map[string]any{"limit": 1}); status != http.StatusOK || code != "" {
				t.Fatalf("after the panic, process.list: status %d code %q: the backend stopped serving", status, code)
			}
			if err := bk.srv.Audit().Close(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			starts, ends := audittest.CallPairs(t, auditRecords(t, path))
			var panicked []map[string]string
			for id, e := range ends {
				if e[audit.FieldTool] == tc.tool {
					panicked = append(panicked, e)
					if starts[id] == nil {
						t.Errorf("end record without its start: %v", e)
					}
				}
			}
			if len(panicked) != 1 || panicked[0][audit.FieldOutcome] != string(mcpwire.CodeInternal) {
				t.Errorf("end records of %s: %v, want one with outcome %s", tc.tool, panicked, mcpwire.CodeInternal)
			}
			if m := bk.metrics(t); !m.Idle() {
				t.Errorf("the panicked call kept its slot: %+v", m)
			}
		})
	}
}
