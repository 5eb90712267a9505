package server

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// truncatedMeta is the _meta key that says the server cut the result.
const truncatedMeta = "mcp-backend/truncated"

// envelopeSlack covers what the JSON-RPC envelope (jsonrpc, id) and SSE
// framing add around a result.
const envelopeSlack = 1024

// fitResult keeps the encoded tool result within budget bytes. JSON escaping
// can multiply binary or control-byte output several times, so it measures
// the encoded bytes, never the raw ones. It first drops the text copy of the
// structured content, then truncates the longest strings of the structured
// content and flags the result as truncated. It never exceeds the budget: as a
// last resort the result becomes a short error.
func fitResult(res *mcp.CallToolResult, budget int64) (*mcp.CallToolResult, bool) {
	limit := int(budget) - envelopeSlack
	if upperBound(res) <= limit {
		return res, false
	}
	// Encoding a huge result only to learn it is too big costs tens of
	// megabytes per call; the lower bound settles most cases without it.
	if lowerBound(res) <= limit && encodedLen(res) <= limit {
		return res, false
	}
	// A tool error is its envelope, twice (text and _meta): render it
	// again with its message cut rather than cut the JSON it carries.
	if te := toolerr.FromResult(res); te != nil && res.StructuredContent == nil {
		if r := toolerr.Result(te); encodedLen(r) <= limit {
			return r, true
		}
	}
	out := *res
	if out.StructuredContent != nil {
		out.Content = []mcp.Content{&mcp.TextContent{Text: "result truncated to fit the response budget; see structuredContent"}}
		// Most often the structured content fits and only its text copy
		// does not: drop the copy and leave the content as it is.
		if raw, ok := out.StructuredContent.(json.RawMessage); ok && len(raw)+512 <= limit {
			return &out, true
		}
		var v any
		b, ok := out.StructuredContent.(json.RawMessage)
		var err error
		if !ok {
			b, err = json.Marshal(out.StructuredContent)
		}
		if err == nil && json.Unmarshal(b, &v) == nil {
			// The output schemas forbid unknown keys: flag through the
			// tool's own keys where it has them, and always in _meta.
			if m, ok := v.(map[string]any); ok {
				for _, k := range []string{"truncated", "outputLimited"} {
					if _, has := m[k]; has {
						m[k] = true
					}
				}
				if _, has := m["eof"]; has {
					m["eof"] = false
				}
			}
			out.Meta = mcp.Meta{truncatedMeta: true}
			for i := 0; i < 16; i++ {
				sb, err := json.Marshal(v)
				if err != nil {
					break
				}
				out.StructuredContent = json.RawMessage(sb)
				// The rest of the result is a short note and flags.
				n := len(sb) + 512
				if n <= limit {
					return &out, true
				}
				if !shrinkLongest(&v, n-limit) {
					break
				}
			}
		}
	} else {
		// Unstructured content: truncate text blocks.
		var cs []mcp.Content
		for _, c := range out.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				cs = append(cs, &mcp.TextContent{Text: truncateUTF8(t.Text, limit/8)})
			}
		}
		out.Content = cs
		if encodedLen(&out) <= limit {
			return &out, true
		}
	}
	return toolerr.Result(toolerr.New(mcpwire.CodeOutputLimit, "result does not fit the response budget")), true
}

// upperBound bounds the encoded size of a result from above without
// encoding it: the usual result is far below the budget, and encoding
// megabytes only to learn that would cost every call.
func upperBound(res *mcp.CallToolResult) int {
	n := 512 // field names, flags
	for k, v := range res.Meta {
		// _meta repeats a tool error's envelope: it counts like the rest.
		n += jsonsize.Max(k) + 8
		switch m := v.(type) {
		case json.RawMessage:
			n += len(m)
		case bool:
			n += 5
		default:
			return int(^uint(0) >> 1)
		}
	}
	switch sc := res.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		n += len(sc)
	default:
		return int(^uint(0) >> 1)
	}
	for _, c := range res.Content {
		t, ok := c.(*mcp.TextContent)
		if !ok {
			return int(^uint(0) >> 1)
		}
		n += jsonsize.Max(t.Text) + 64
	}
	return n
}

// lowerBound bounds the encoded size of a result from below, without
// encoding it.
func lowerBound(res *mcp.CallToolResult) int {
	n := 0
	if raw, ok := res.StructuredContent.(json.RawMessage); ok {
		n += len(raw)
	}
	for _, v := range res.Meta {
		if raw, ok := v.(json.RawMessage); ok {
			n += len(raw)
		}
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			n += jsonsize.Min(t.Text)
		}
	}
	return n
}

func encodedLen(res *mcp.CallToolResult) int {
	b, err := json.Marshal(res)
	if err != nil {
		return int(^uint(0) >> 1)
	}
	return len(b)
}

// shrinkLongest cuts the string with the longest encoding in v so that the
// whole shrinks by at least excess bytes. It reports false when there is no
// string left to cut.
func shrinkLongest(v *any, excess int) bool {
	bestLen := 0
	var best string
	var set func(string) // writes the chosen string back
	consider := func(s string, w func(string)) {
		if n := jsonsize.Max(s); n > bestLen {
			bestLen, best, set = n, s, w
		}
	}
	var walk func(x any)
	walk = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				if s, ok := e.(string); ok {
					consider(s, func(ns string) { t[k] = ns })
				} else {
					walk(e)
				}
			}
		case []any:
			for i, e := range t {
				if s, ok := e.(string); ok {
					consider(s, func(ns string) { t[i] = ns })
				} else {
					walk(e)
				}
			}
		}
	}
	walk(*v)
	if set == nil || bestLen <= 2 {
		return false
	}
	set(jsonsize.PrefixWithin(best, bestLen-excess-64))
	return true
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
