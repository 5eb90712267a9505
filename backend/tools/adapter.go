package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// toolDef is a tool with its low-level handler, built once in New.
type toolDef struct {
	tool    *mcp.Tool
	handler mcp.ToolHandler
	// args is the tool's one decode of its arguments (see Tools.Args).
	args func(json.RawMessage) (json.RawMessage, *toolerr.Error)
}

// schemaTweaker lets an input type adjust its derived schema (enums, unions,
// bounds) where Go types alone cannot say it.
type schemaTweaker interface {
	tweakSchema(s *jsonschema.Schema)
}

// binder builds a tool's definition from its descriptor.
type binder func(tooldesc.Tool) toolDef

// handle is the handler and description of a tool, bound to its
// descriptor in New.
func handle[In, Out any](t *Tools, description string, fn func(context.Context, In) (Out, error)) binder {
	return func(d tooldesc.Tool) toolDef { return define(t, d, description, fn) }
}

// bind pairs each descriptor with its handler, in the descriptors' order.
// A descriptor without a handler, or a handler without a descriptor, is a
// programming error the backend must not start with.
func bind(descs []tooldesc.Tool, handlers map[string]binder) []toolDef {
	defs := make([]toolDef, 0, len(descs))
	for _, d := range descs {
		b, ok := handlers[d.Name]
		if !ok {
			panic(fmt.Sprintf("tools: %s has a descriptor and no handler", d.Name))
		}
		defs = append(defs, b(d))
	}
	for name := range handlers {
		if !slices.ContainsFunc(descs, func(d tooldesc.Tool) bool { return d.Name == name }) {
			panic(fmt.Sprintf("tools: %s has a handler and no descriptor", name))
		}
	}
	return defs
}

// define builds a tool from a typed function. The SDK's typed mcp.AddTool
// would turn a returned error into a text-only result and drop the
// structured error envelope, so this adapter registers with the low-level
// (*mcp.Server).AddTool and renders successes and failures itself.
func define[In, Out any](t *Tools, d tooldesc.Tool, description string, fn func(context.Context, In) (Out, error)) toolDef {
	name := d.Name
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: input schema of %s: %v", name, err))
	}
	dropNullable(in)
	var zero In
	if tw, ok := any(&zero).(schemaTweaker); ok {
		tw.tweakSchema(in)
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tools: resolve input schema of %s: %v", name, err))
	}
	emptyErr := resolved.Validate(map[string]any{})
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: output schema of %s: %v", name, err))
	}
	ann := annotations(d)
	tool := &mcp.Tool{
		Name:         name,
		Description:  description,
		InputSchema:  in,
		OutputSchema: out,
		Annotations:  ann,
	}
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// A panic is recovered once, by the server around the whole call.
		var raw json.RawMessage
		if req != nil && req.Params != nil {
			raw = req.Params.Arguments
		}
		arg, terr := decodeArgs[In](raw, resolved, emptyErr)
		if terr != nil {
			return toolerr.Result(terr), nil
		}
		v, err := fn(ctx, arg)
		if err != nil {
			return toolerr.Result(classify(err)), nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return toolerr.Result(toolerr.New(mcpwire.CodeInternal, "%s: encode result: %v", name, err)), nil
		}
		return &mcp.CallToolResult{
			StructuredContent: json.RawMessage(b),
			Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		}, nil
	}
	args := func(raw json.RawMessage) (json.RawMessage, *toolerr.Error) {
		if _, terr := decodeArgs[In](raw, resolved, emptyErr); terr != nil {
			return nil, terr
		}
		return canonicalArgs(raw)
	}
	return toolDef{tool: tool, handler: handler, args: args}
}

// Args is the one decode of a call's arguments that everything after it
// reads: the policy, the approval digest, the audit record and the run.
// It refuses what the tool would refuse (the tool's schema and its Go
// type: an unknown key, a key in another case, a duplicate key, a number
// that does not fit) and returns the arguments in canonical form: keys
// sorted, no spaces, numbers as written, so that the bytes the policy
// judged are the bytes that run.
func (t *Tools) Args(name string, raw json.RawMessage) (json.RawMessage, *toolerr.Error) {
	for _, d := range t.defs {
		if d.tool.Name == name {
			return d.args(raw)
		}
	}
	return nil, toolerr.New(mcpwire.CodeInvalidArgument, "unknown tool %q", name)
}

// canonicalArgs re-encodes valid arguments: encoding/json sorts map keys,
// and json.Number keeps each number's text (a float64 would turn 60000.0
// into 60000 and round large integers).
func canonicalArgs(raw json.RawMessage) (json.RawMessage, *toolerr.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("{}")) {
		return json.RawMessage("{}"), nil // the most frequent calls take no arguments
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, toolerr.New(mcpwire.CodeInvalidArgument, "arguments: %v", err)
	}
	return json.RawMessage(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// checkKeys refuses an argument object with a key twice, at any depth,
// or two argument names that differ only in case: encoding/json matches
// names case-insensitively and keeps the last, so either would let one
// reading of the arguments differ from another.
func checkKeys(raw []byte) *toolerr.Error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var walk func(path string, depth int) *toolerr.Error
	walk = func(path string, depth int) *toolerr.Error {
		tok, err := dec.Token()
		if err != nil {
			return toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
				}
				k, _ := kt.(string)
				name := k
				if path != "" {
					name = path + "." + k
				}
				fold := k
				if depth == 0 {
					fold = strings.ToLower(k)
				}
				if prev, dup := seen[fold]; dup {
					if prev == k {
						return toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: given twice", truncate(name, maxErrorMessageLength/2))
					}
					return toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: given twice, also as %q (argument names are case-sensitive)",
						truncate(name, maxErrorMessageLength/4), truncate(prev, maxErrorMessageLength/4))
				}
				seen[fold] = k
				if terr := walk(name, depth+1); terr != nil {
					return terr
				}
			}
			_, err := dec.Token() // '}'
			if err != nil {
				return toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
			}
		case json.Delim('['):
			for dec.More() {
				if terr := walk(path+".*", depth+1); terr != nil {
					return terr
				}
			}
			if _, err := dec.Token(); err != nil {
				return toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
			}
		}
		return nil
	}
	return walk("", 0)
}

// dropNullable makes an optional pointer argument (["null","integer"]) a
// plain type: an omitted argument takes its default, and clients that build
// a form from the schema (Inspector) send a union type as a string.
func dropNullable(s *jsonschema.Schema) {
	for _, p := range s.Properties {
		if len(p.Types) == 2 && slices.Contains(p.Types, "null") {
			t := p.Types[0]
			if t == "null" {
				t = p.Types[1]
			}
			p.Type, p.Types = t, nil
		}
	}
}

// decodeArgs validates raw arguments against the resolved input schema and
// unmarshals them; failures are INVALID_ARGUMENT naming the field. emptyErr
// is the schema's verdict on {}, computed once: calls without arguments
// (system.info, process.list) are the most frequent.
func decodeArgs[In any](raw json.RawMessage, resolved *jsonschema.Resolved, emptyErr error) (In, *toolerr.Error) {
	var in In
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("{}")) {
		if emptyErr != nil {
			return in, toolerr.New(mcpwire.CodeInvalidArgument, "%s", schemaMessage(emptyErr))
		}
		return in, nil
	}
	if raw[0] == '{' {
		if terr := checkKeys(raw); terr != nil {
			return in, terr
		}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return in, toolerr.New(mcpwire.CodeInvalidArgument, "arguments must be a JSON object: %v", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	if err := resolved.Validate(m); err != nil {
		return in, toolerr.New(mcpwire.CodeInvalidArgument, "%s", schemaMessage(err))
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return in, toolerr.New(mcpwire.CodeInvalidArgument, "argument %q: %s does not fit %s", ute.Field, ute.Value, ute.Type)
		}
		return in, toolerr.New(mcpwire.CodeInvalidArgument, "arguments: %v", err)
	}
	return in, nil
}

// schemaMessage turns jsonschema's nested "validating root: validating
// /properties/x: reason" chain into "argument "x": reason".
func schemaMessage(err error) string {
	s := err.Error()
	path := ""
	for strings.HasPrefix(s, "validating ") {
		rest := s[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		path, s = rest[:i], rest[i+2:]
	}
	field := fieldName(path)
	var msg string
	switch {
	case strings.HasPrefix(s, "required: missing properties: "):
		msg = "missing required argument " + strings.TrimPrefix(s, "required: missing properties: ")
		if field != "" {
			msg = fmt.Sprintf("argument %q: %s", field, msg)
		}
	case strings.HasPrefix(s, "unexpected additional properties "):
		msg = "unknown argument " + strings.TrimPrefix(s, "unexpected additional properties ")
		if field != "" {
			msg = fmt.Sprintf("argument %q: %s", field, msg)
		}
	case field != "":
		msg = fmt.Sprintf("argument %q: %s", field, s)
	default:
		msg = "arguments: " + s
	}
	// jsonschema prints bounds as rationals and floats ("0/1 is less than
	// 1.000000"); show plain numbers.
	msg = ratNumber.ReplaceAllString(msg, "$1")
	msg = floatNumber.ReplaceAllString(msg, "$1")
	return truncate(msg, maxErrorMessageLength)
}

var (
	ratNumber   = regexp.MustCompile(`\b(-?\d+)/1\b`)
	floatNumber = regexp.MustCompile(`\b(\d+)\.0+\b`)
)

// fieldName maps a schema path like /properties/env/additionalProperties to
// the argument name "env.*"; the root maps to "".
func fieldName(path string) string {
	if path == "" || path == "root" {
		return ""
	}
	var parts []string
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i < len(segs); i++ {
		switch segs[i] {
		case "properties":
			if i+1 < len(segs) {
				parts = append(parts, segs[i+1])
				i++
			}
		case "additionalProperties", "items":
			parts = append(parts, "*")
		}
	}
	return strings.Join(parts, ".")
}

// classify maps a tool function's error to a toolerr.Error: structured errors
// pass through, cancellation of the call's context becomes CANCELLED, a
// deadline TIMEOUT, anything else INTERNAL.
func classify(err error) *toolerr.Error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	switch {
	case errors.Is(err, context.Canceled):
		return toolerr.New(mcpwire.CodeCancelled, "cancelled by the client: %v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return toolerr.New(mcpwire.CodeTimeout, "%v", err)
	}
	return toolerr.New(mcpwire.CodeInternal, "%s", truncate(err.Error(), maxErrorMessageLength))
}

// truncate shortens s to at most n bytes (plus "...") on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n) + "..."
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// end inside a multi-byte rune.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// annotations are a tool's hints: read-only or destructive, and acting on
// this host only.
func annotations(d tooldesc.Tool) *mcp.ToolAnnotations {
	if d.ReadOnly {
		return &mcp.ToolAnnotations{Title: d.Name, ReadOnlyHint: true, OpenWorldHint: new(false)}
	}
	return &mcp.ToolAnnotations{Title: d.Name, DestructiveHint: new(true), OpenWorldHint: new(false)}
}
