package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// tools/list shows exactly the tools of mcpwire.ToolNames, each with
// object input and output schemas.
func TestToolsList(t *testing.T) {
	h := newHarness(t, testOptions())
	res, err := h.client.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		for what, s := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			b, _ := json.Marshal(s)
			var sch jsonschema.Schema
			if err := json.Unmarshal(b, &sch); err != nil || sch.Type != "object" || len(sch.Properties) == 0 && what == "input" && tool.Name != mcpwire.ToolSystemInfo && tool.Name != mcpwire.ToolJobList {
				t.Fatalf("%s %s schema: %s (%v)", tool.Name, what, b, err)
			}
		}
		if tool.Description == "" || tool.Annotations == nil {
			t.Fatalf("%s: no description or annotations", tool.Name)
		}
	}
	want := mcpwire.ToolNames()
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) || len(want) != 15 {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func TestArgumentsMustBeObject(t *testing.T) {
	tl := New(testOptions())
	defer tl.Close()
	for _, raw := range []string{`[1,2]`, `"x"`, `{`} {
		res, err := handlerOf(t, tl, mcpwire.ToolFileList)(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: mcpwire.ToolFileList, Arguments: json.RawMessage(raw)}})
		if err != nil {
			t.Fatal(err)
		}
		wantToolError(t, res, mcpwire.CodeInvalidArgument)
	}
}

// A descriptor without a handler, or a handler without a descriptor,
// stops the backend at start rather than serving a tool half known.
func TestBindRefusesUnpaired(t *testing.T) {
	tl := New(testOptions())
	sys, _ := tooldesc.Lookup(mcpwire.ToolSystemInfo)
	h := handle(tl, "facts", tl.systemInfo)
	tests := []struct {
		name     string
		descs    []tooldesc.Tool
		handlers map[string]binder
		panics   bool
	}{
		{"paired", []tooldesc.Tool{sys}, map[string]binder{sys.Name: h}, false},
		{"descriptor without handler", []tooldesc.Tool{sys}, map[string]binder{}, true},
		{"handler without descriptor", nil, map[string]binder{sys.Name: h}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if p := recover(); (p != nil) != tc.panics {
					t.Errorf("panic = %v, want a panic: %v", p, tc.panics)
				}
			}()
			if defs := bind(tc.descs, tc.handlers); len(defs) != len(tc.descs) {
				t.Errorf("%d definitions for %d descriptors", len(defs), len(tc.descs))
			}
		})
	}
}

func TestSchemaMessage(t *testing.T) {
	tests := []struct{ path, want string }{
		{"root", ""},
		{"/properties/command", "command"},
		{"/properties/env/additionalProperties", "env.*"},
	}
	for _, tc := range tests {
		if got := fieldName(tc.path); got != tc.want {
			t.Fatalf("fieldName(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		code mcpwire.Code
	}{
		{toolerr.New(mcpwire.CodeNotFound, "x"), mcpwire.CodeNotFound},
		{fmt.Errorf("wrapped: %w", toolerr.New(mcpwire.CodePermissionDenied, "x")), mcpwire.CodePermissionDenied},
		{fmt.Errorf("shell.exec: %w", context.Canceled), mcpwire.CodeCancelled},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), mcpwire.CodeTimeout},
		{errors.New("surprise"), mcpwire.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			if got := classify(tc.err).Code; got != tc.code {
				t.Fatalf("got %s, want %s", got, tc.code)
			}
		})
	}
}

// Optional integer arguments are plain "integer", not ["null","integer"]:
// form-based clients (Inspector) send a union-typed field as a string, and
// an omitted argument already takes its default.
func TestOptionalIntegersArePlainIntegers(t *testing.T) {
	h := newHarness(t, testOptions())
	res, err := h.client.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatal(err)
		}
		for name, p := range sch.Properties {
			if slices.Contains(p.Types, "null") || p.Type == "null" {
				t.Errorf("%s: argument %s is nullable: %v", tool.Name, name, p.Types)
			}
			if tool.Name == mcpwire.ToolShellExec && name == "timeoutMs" {
				checked++
				if p.Type != "integer" {
					t.Errorf("shell.exec timeoutMs: type %q types %v, want integer", p.Type, p.Types)
				}
			}
		}
	}
	if checked != 1 {
		t.Fatalf("shell.exec has no timeoutMs argument")
	}
	// null is no longer an accepted value; omitted still is.
	fails(t, h, mcpwire.ToolShellExec, map[string]any{"command": "true", "timeoutMs": nil}, mcpwire.CodeInvalidArgument)
	ok[mcpwire.ShellResult](t, h, mcpwire.ToolShellExec, map[string]any{"command": "true"})
}

// TestArgsOneStrictDecode: Args refuses what the tool would refuse
// (naming the key) and returns the canonical form the policy, the
// approval and the run all read; env names that differ in case are two
// variables, not a duplicate.
func TestArgsOneStrictDecode(t *testing.T) {
	tl := New(testOptions())
	defer tl.Close()
	for _, tc := range []struct {
		name, tool, raw string
		want            string // canonical form, or the refusal's text
		ok              bool
	}{
		{"canonical: sorted, compact, numbers as written", mcpwire.ToolShellExec, ` {"timeoutMs": 9007199254740993, "command" : "a <b> & c"} `, `{"command":"a <b> & c","timeoutMs":9007199254740993}`, true},
		{"empty", mcpwire.ToolSystemInfo, ``, `{}`, true},
		{"null", mcpwire.ToolSystemInfo, `null`, `{}`, true},
		{"env names in two cases are two variables", mcpwire.ToolShellExec, `{"command":"env","env":{"a":"1","A":"2"}}`, `{"command":"env","env":{"A":"2","a":"1"}}`, true},
		{"a key in another case", mcpwire.ToolShellExec, `{"Command":"touch x","command":"ls"}`, `"command": given twice, also as "Command"`, false},
		{"only a key in another case", mcpwire.ToolShellExec, `{"Command":"touch x"}`, `unknown argument ["Command"]`, false},
		{"a key twice", mcpwire.ToolShellExec, `{"command":"ls","command":"touch x"}`, `"command": given twice`, false},
		{"a key twice in env", mcpwire.ToolShellExec, `{"command":"ls","env":{"A":"1","A":"2"}}`, `"env.A": given twice`, false},
		{"a number its type cannot hold", mcpwire.ToolShellExec, `{"command":"ls","timeoutMs":60000.0}`, `timeoutMs`, false},
		{"an unknown tool", "no.such", `{}`, `unknown tool`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, te := tl.Args(tc.tool, json.RawMessage(tc.raw))
			switch {
			case tc.ok && te != nil:
				t.Fatalf("refused: %v", te)
			case tc.ok && string(got) != tc.want:
				t.Fatalf("canonical %s, want %s", got, tc.want)
			case !tc.ok && (te == nil || te.Code != mcpwire.CodeInvalidArgument || !strings.Contains(te.Message, tc.want)):
				t.Fatalf("got %s %v, want INVALID_ARGUMENT with %q", got, te, tc.want)
			}
		})
	}
}
