// Package stress drives mcp-backend with vegeta at rates above its capacity
// and judges what it saw: bounded concurrency (measured by the commands
// themselves, not only taken from /metrics), clean structured OVERLOADED
// failures, responsive control calls and liveness, a stable unit, and a
// return to idle with balanced counters. Decisions are pure (Assess turns
// Facts into PASS/FAIL checks); the effects (attack, samplers, faults) are
// thin and bounded in count and time, and only ever aim at loopback.
package stress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/overdeck/mcp-backend/mcpwire"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// ProtocolVersion is the MCP protocol version the stress speaks. Stateless
// Streamable HTTP needs no initialize round trip, only this header.
const ProtocolVersion = "2025-06-18"

// Class is a tool's admission class (DESIGN.md §3).
type Class string

// The admission classes. Shell is a normal tool that also takes a shell slot.
const (
	ClassShell   Class = "shell"
	ClassNormal  Class = "normal"
	ClassControl Class = "control"
)

// Classes lists the classes in report order.
var Classes = []Class{ClassShell, ClassNormal, ClassControl}

// ClassOf returns the admission class of a tool name.
func ClassOf(tool string) Class {
	switch tool {
	case "shell.exec":
		return ClassShell
	case "system.info", "process.list", "service.status", "process.kill", "service.control":
		return ClassControl
	}
	return ClassNormal
}

// Outcome is what one tools/call came to, judged from the HTTP status and
// the JSON-RPC payload rather than from the status alone.
type Outcome string

// The outcomes. Only OK, Overloaded and Cancelled are acceptable under load.
const (
	OutcomeOK         Outcome = "ok"
	OutcomeOverloaded Outcome = "overloaded"
	OutcomeCancelled  Outcome = "cancelled"
	OutcomeToolError  Outcome = "tool_error"      // isError with another code, or unstructured
	OutcomeRPCError   Outcome = "rpc_error"       // a JSON-RPC error object
	OutcomeHTTPError  Outcome = "http_error"      // any status but 200
	OutcomeTransport  Outcome = "transport_error" // no HTTP response at all
	OutcomeBadReply   Outcome = "bad_response"    // 200 but not a matching JSON-RPC response
)

// Outcomes lists the outcomes in report order.
var Outcomes = []Outcome{OutcomeOK, OutcomeOverloaded, OutcomeCancelled, OutcomeToolError, OutcomeRPCError, OutcomeHTTPError, OutcomeTransport, OutcomeBadReply}

// Acceptable reports whether an outcome is allowed under load.
func (o Outcome) Acceptable() bool {
	return o == OutcomeOK || o == OutcomeOverloaded || o == OutcomeCancelled
}

// Headers returns the request headers of a stateless Streamable HTTP POST.
func Headers() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", ProtocolVersion)
	return h
}

// CallBody encodes a JSON-RPC tools/call request.
func CallBody(id uint64, tool string, args any) []byte {
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"method":  "tools/call",
		"params":  map[string]any{"name": tool, "arguments": args},
	})
	if err != nil { // maps of strings and numbers always encode
		panic(fmt.Sprintf("stress: encode tools/call: %v", err))
	}
	return b
}

// Reply is a classified tools/call response.
type Reply struct {
	Outcome Outcome
	// Code is the tool error code (OVERLOADED, TIMEOUT, ...), the JSON-RPC
	// error code, the HTTP status, or empty.
	Code string
	// Detail is a short human explanation of a non-ok outcome.
	Detail string
	// Structured is the result's structuredContent (nil when absent).
	Structured json.RawMessage
	// Text is the concatenated text content.
	Text string
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage            `json:"structuredContent"`
		IsError           bool                       `json:"isError"`
		Meta              map[string]json.RawMessage `json:"_meta"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// toolErrorEnvelope is the JSON of a failed tool call, carried in _meta
// under errorMetaKey and as the text content.
type toolErrorEnvelope struct {
	Error *struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

// errorMetaKey is the result _meta key of the error envelope.
const errorMetaKey = "mcp-backend/error"

func decodeEnvelope(b []byte, env *toolErrorEnvelope) bool {
	return len(b) > 0 && json.Unmarshal(b, env) == nil && env.Error != nil && env.Error.Code != ""
}

// Classify judges one response to the tools/call with JSON-RPC id wantID.
// transportErr is non-empty when no HTTP response arrived. The body may be
// plain JSON or SSE (text/event-stream) framing.
func Classify(wantID uint64, status int, transportErr string, contentType string, body []byte) Reply {
	switch {
	case status == 0:
		msg := transportErr
		if msg == "" {
			msg = "no response"
		}
		return Reply{Outcome: OutcomeTransport, Detail: msg}
	case status != http.StatusOK:
		return Reply{Outcome: OutcomeHTTPError, Code: strconv.Itoa(status), Detail: fmt.Sprintf("HTTP %d: %s", status, snippet(body))}
	case transportErr != "":
		// A status arrived but reading the body failed.
		return Reply{Outcome: OutcomeTransport, Detail: transportErr}
	}
	msgs, err := Messages(contentType, body)
	if err != nil {
		return Reply{Outcome: OutcomeBadReply, Detail: err.Error()}
	}
	want := strconv.FormatUint(wantID, 10)
	for _, m := range msgs {
		var r rpcResponse
		if json.Unmarshal(m, &r) != nil || (r.Result == nil && r.Error == nil) {
			continue // a notification or something else on the stream
		}
		if string(bytes.TrimSpace(r.ID)) != want {
			return Reply{Outcome: OutcomeBadReply, Detail: fmt.Sprintf("response id %s, want %s", r.ID, want)}
		}
		if r.Error != nil {
			return Reply{Outcome: OutcomeRPCError, Code: strconv.Itoa(r.Error.Code), Detail: "JSON-RPC error: " + r.Error.Message}
		}
		var text strings.Builder
		for _, c := range r.Result.Content {
			if c.Type == "text" {
				text.WriteString(c.Text)
			}
		}
		rep := Reply{Outcome: OutcomeOK, Structured: r.Result.StructuredContent, Text: text.String()}
		if !r.Result.IsError {
			return rep
		}
		var env toolErrorEnvelope
		if !decodeEnvelope(r.Result.Meta[errorMetaKey], &env) && !decodeEnvelope([]byte(rep.Text), &env) {
			rep.Outcome = OutcomeToolError
			rep.Detail = "tool error without {\"error\":{\"code\"}}: " + snippet([]byte(rep.Text))
			return rep
		}
		rep.Code = env.Error.Code
		switch env.Error.Code {
		case "OVERLOADED":
			rep.Outcome = OutcomeOverloaded
		case "CANCELLED":
			rep.Outcome = OutcomeCancelled
		default:
			rep.Outcome = OutcomeToolError
			rep.Detail = env.Error.Code + ": " + env.Error.Message
		}
		return rep
	}
	return Reply{Outcome: OutcomeBadReply, Detail: "no JSON-RPC response in body: " + snippet(body)}
}

// Messages splits a Streamable HTTP response body into JSON-RPC messages:
// the body itself for application/json, the data of each event for
// text/event-stream.
func Messages(contentType string, body []byte) ([]json.RawMessage, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "" {
		// Sniff: SSE bodies start with a field name or a comment.
		t := bytes.TrimLeft(body, " \r\n")
		if bytes.HasPrefix(t, []byte("data:")) || bytes.HasPrefix(t, []byte("event:")) || bytes.HasPrefix(t, []byte("id:")) || bytes.HasPrefix(t, []byte(":")) {
			mt = "text/event-stream"
		}
	}
	if mt != "text/event-stream" {
		t := bytes.TrimSpace(body)
		if len(t) == 0 {
			return nil, fmt.Errorf("empty body (content type %q)", contentType)
		}
		if t[0] == '[' {
			var batch []json.RawMessage
			if err := json.Unmarshal(t, &batch); err != nil {
				return nil, fmt.Errorf("body is not JSON: %w", err)
			}
			return batch, nil
		}
		if !json.Valid(t) {
			return nil, fmt.Errorf("body is not JSON: %s", snippet(t))
		}
		return []json.RawMessage{t}, nil
	}
	var msgs []json.RawMessage
	var data bytes.Buffer
	flush := func() {
		if data.Len() > 0 {
			msgs = append(msgs, json.RawMessage(bytes.Clone(data.Bytes())))
			data.Reset()
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read event stream: %w", err)
	}
	flush()
	if len(msgs) == 0 {
		return nil, fmt.Errorf("event stream without data: %s", snippet(body))
	}
	return msgs, nil
}

// ShellResult is shell.exec's structured result, as the backend defines it.
type ShellResult = mcpwire.ShellResult

// ShellOf decodes a shell.exec result from the structured content, or from
// the text content when the server sent no structured content.
func ShellOf(r Reply) (ShellResult, error) {
	var s ShellResult
	src := []byte(r.Structured)
	if len(src) == 0 {
		src = []byte(r.Text)
	}
	if err := json.Unmarshal(src, &s); err != nil {
		return s, fmt.Errorf("shell.exec result: %w", err)
	}
	return s, nil
}

func snippet(b []byte) string {
	const max = 160
	s := strings.ToValidUTF8(string(b[:min(len(b), max)]), "?")
	if len(b) > max {
		s += "..."
	}
	return strings.TrimSpace(s)
}
