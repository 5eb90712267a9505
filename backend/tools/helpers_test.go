package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// harness is a real *mcp.Server with the tools, connected to a go-sdk
// client over the in-memory transport.
type harness struct {
	tools  *Tools
	client *mcp.ClientSession
}

func testOptions() Options {
	return Options{
		OutputBytes:    1 << 20,
		ShellPath:      "/bin/bash",
		DefaultTimeout: 20 * time.Second,
		MaxTimeout:     60 * time.Second,
	}
}

func newHarness(t testing.TB, opts Options) *harness {
	t.Helper()
	tl := New(opts)
	srv := mcp.NewServer(&mcp.Implementation{Name: "tools-test", Version: "0"}, nil)
	tl.Register(srv)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tools-test-client", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Close()
		tl.Close()
	})
	return &harness{tools: tl, client: cs}
}

// call invokes a tool through the MCP client and checks the invariants every
// result must keep: exactly one text content holding the same JSON as the
// structured content.
func (h *harness) call(t testing.TB, name string, args any) *mcp.CallToolResult {
	t.Helper()
	return h.callCtx(context.Background(), t, name, args)
}

func (h *harness) callCtx(ctx context.Context, t testing.TB, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := h.client.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: transport error: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: want 1 content, got %d", name, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T, want text", name, res.Content[0])
	}
	if res.IsError {
		return res // wantToolError checks the error shape
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: structured content: %v", name, err)
	}
	if !jsonEqual(t, sc, []byte(tc.Text)) {
		t.Fatalf("%s: text content differs from structured content:\ntext: %.300s\nstructured: %.300s", name, tc.Text, sc)
	}
	return res
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// ok calls a tool, requires success, checks the structured content against
// the tool's advertised output schema and decodes it into T.
func ok[T any](t testing.TB, h *harness, name string, args any) T {
	t.Helper()
	res := h.call(t, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): unexpected error: %s", name, args, res.Content[0].(*mcp.TextContent).Text)
	}
	b, _ := json.Marshal(res.StructuredContent)
	checkOutputSchema(t, h, name, b)
	var out T
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s: decode result: %v", name, err)
	}
	return out
}

func checkOutputSchema(t testing.TB, h *harness, name string, b []byte) {
	t.Helper()
	for _, d := range h.tools.defs {
		if d.tool.Name != name {
			continue
		}
		rs, err := d.tool.OutputSchema.(*jsonschema.Schema).Resolve(nil)
		if err != nil {
			t.Fatalf("%s: resolve output schema: %v", name, err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := rs.Validate(v); err != nil {
			t.Fatalf("%s: result does not match its output schema: %v", name, err)
		}
		return
	}
	t.Fatalf("no tool %s", name)
}

// fails calls a tool and requires a structured error with code.
func fails(t testing.TB, h *harness, name string, args any, code mcpwire.Code) *mcpwire.ToolError {
	t.Helper()
	return wantToolError(t, h.call(t, name, args), code)
}

func wantToolError(t testing.TB, res *mcp.CallToolResult, code mcpwire.Code) *mcpwire.ToolError {
	t.Helper()
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		t.Fatalf("want error %s, got success: %.500s", code, b)
	}
	// Strict clients validate structuredContent against the outputSchema
	// even on errors: an error result must carry none.
	if res.StructuredContent != nil {
		t.Fatalf("error result carries structuredContent %v", res.StructuredContent)
	}
	if len(res.Content) != 1 {
		t.Fatalf("error result has %d contents, want 1", len(res.Content))
	}
	tc, isText := res.Content[0].(*mcp.TextContent)
	if !isText {
		t.Fatalf("error content is %T, want text", res.Content[0])
	}
	b := []byte(tc.Text)
	meta, _ := json.Marshal(res.Meta[mcpwire.ErrorMetaKey])
	if !jsonEqual(t, meta, b) {
		t.Fatalf("_meta %q differs from the text envelope:\nmeta: %s\ntext: %s", mcpwire.ErrorMetaKey, meta, b)
	}
	var env mcpwire.ErrorEnvelope
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || env.Error == nil {
		t.Fatalf("error result is not an envelope (%v): %s", err, b)
	}
	if env.Error.Code != code {
		t.Fatalf("want code %s, got %s: %s", code, env.Error.Code, env.Error.Message)
	}
	if env.Error.Message == "" {
		t.Fatalf("empty error message")
	}
	return env.Error
}

// grandchildren is a shell snippet that starts two background sleeps and
// records their pids in file.
func grandchildren(file string) string {
	return fmt.Sprintf("sleep 300 & echo $! >> %[1]s; sleep 301 & echo $! >> %[1]s; ", file)
}

func tempFile(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(t.TempDir(), name)
}
