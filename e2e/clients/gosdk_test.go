package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// The Go SDK client: tools, an error result with its code, and a cancelled
// context killing the command, over HTTP and stdio.
func TestGoSDK(t *testing.T) {
	tests := []struct {
		name      string
		transport func(t *testing.T) mcp.Transport
	}{
		{"http", func(t *testing.T) mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: startHTTP(t, `{}`).url}
		}},
		{"stdio", func(t *testing.T) mcp.Transport {
			argv := stdioCommand(t, `{}`)
			return &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client := mcp.NewClient(&mcp.Implementation{Name: "mcp-backend-tests", Version: "1.0.0"}, nil)
			cs, err := client.Connect(ctx, tc.transport(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			tools, err := cs.ListTools(ctx, nil)
			if err != nil || len(tools.Tools) != len(mcpwire.ToolNames()) {
				t.Fatalf("tools/list: %v %v", err, tools)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{"command": "echo go", "timeoutMs": 5000}})
			if err != nil || res.IsError {
				t.Fatalf("shell.exec: %v %+v", err, res)
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "file.read", Arguments: map[string]any{"path": filepath.Join(t.TempDir(), "missing")}})
			if err != nil {
				t.Fatal(err)
			}
			if code := errorCode(res); code != "NOT_FOUND" || res.StructuredContent != nil {
				b, _ := json.Marshal(res)
				t.Fatalf("file.read of a missing file: %s", b)
			}

			pidFile := filepath.Join(t.TempDir(), "pid")
			callCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{
					"command": fmt.Sprintf("echo $$ > %s; exec sleep 33", pidFile)}})
				done <- err
			}()
			pgid := proctest.ReadPids(t, pidFile, 1)[0]
			start := time.Now()
			cancel()
			proctest.WaitDead(t, pgid)
			t.Logf("cancel latency over %s (context cancelled -> group gone): %s", tc.name, time.Since(start))
			if err := <-done; err == nil {
				t.Fatal("the cancelled call returned no error")
			}
		})
	}
}

// errorCode reads the error envelope of a result as any client would: from
// its JSON text content.
func errorCode(res *mcp.CallToolResult) string {
	if !res.IsError || len(res.Content) != 1 {
		return ""
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return ""
	}
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(tc.Text), &env)
	return env.Error.Code
}
