package mcpclient

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Kind is what a tools/call came to, judged from the HTTP status and the
// JSON-RPC payload rather than from the status alone.
type Kind string

// The kinds of results.
const (
	KindOK        Kind = "ok"
	KindToolError Kind = "tool_error"      // a result with isError (OVERLOADED and CANCELLED included)
	KindRPCError  Kind = "rpc_error"       // a JSON-RPC error object
	KindHTTPError Kind = "http_error"      // any status but 200
	KindTransport Kind = "transport_error" // no complete HTTP answer
	KindBadReply  Kind = "bad_response"    // 200 but no matching JSON-RPC response
)

// Result is a classified tools/call answer.
type Result struct {
	Kind Kind
	// Code is the tool error code (OVERLOADED, TIMEOUT, ...; empty when a
	// tool error carries no envelope), the JSON-RPC error code, or the
	// HTTP status, by Kind.
	Code string
	// Detail is a short human explanation of anything but KindOK.
	Detail string
	// ToolError is the error envelope's content for KindToolError, when
	// the result carried one.
	ToolError *mcpwire.ToolError
	// Structured is the result's structuredContent (nil when absent).
	Structured json.RawMessage
	// Text is the concatenated text content.
	Text string
}

// OK says the tool call succeeded.
func (r Result) OK() bool { return r.Kind == KindOK }

// Payload is the result's JSON: its structuredContent or, when a server
// leaves that out (as tool errors do), its text content if that is JSON.
func (r Result) Payload() json.RawMessage {
	if len(r.Structured) > 0 {
		return r.Structured
	}
	if t := strings.TrimSpace(r.Text); t != "" && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	return nil
}

// Err is nil for KindOK and otherwise says what went wrong.
func (r Result) Err() error {
	if r.Kind == KindOK {
		return nil
	}
	return errors.New(r.Detail)
}

// Shell decodes a shell.exec result.
func (r Result) Shell() (mcpwire.ShellResult, error) {
	var s mcpwire.ShellResult
	if err := json.Unmarshal(r.Payload(), &s); err != nil {
		return s, fmt.Errorf("shell.exec result: %w", err)
	}
	return s, nil
}

// rpcResponse is one JSON-RPC response message.
type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// toolResult is a tools/call result.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
	Meta              map[string]json.RawMessage `json:"_meta"`
}

// Classify judges the answer to the tools/call with JSON-RPC id wantID.
// status is 0 when no HTTP answer arrived; transportErr is non-empty when
// the request or reading the body failed. The body may be plain JSON or an
// event stream.
func Classify(wantID uint64, status int, transportErr string, contentType string, body []byte) Result {
	switch {
	case status == 0:
		msg := transportErr
		if msg == "" {
			msg = "no response"
		}
		return Result{Kind: KindTransport, Detail: msg}
	case status != http.StatusOK:
		return Result{Kind: KindHTTPError, Code: strconv.Itoa(status), Detail: fmt.Sprintf("HTTP %d: %s", status, Snippet(body))}
	case transportErr != "":
		return Result{Kind: KindTransport, Detail: transportErr}
	}
	msg, err := response(wantID, contentType, body)
	if err != nil {
		return Result{Kind: KindBadReply, Detail: err.Error()}
	}
	if msg.Error != nil {
		return Result{Kind: KindRPCError, Code: strconv.Itoa(msg.Error.Code),
			Detail: fmt.Sprintf("JSON-RPC error %d: %s", msg.Error.Code, msg.Error.Message)}
	}
	var tr toolResult
	if err := json.Unmarshal(msg.Result, &tr); err != nil {
		return Result{Kind: KindBadReply, Detail: "result is not a tool result: " + Snippet(msg.Result)}
	}
	var text strings.Builder
	for _, c := range tr.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
		}
	}
	r := Result{Kind: KindOK, Structured: tr.StructuredContent, Text: text.String()}
	if !tr.IsError {
		return r
	}
	r.Kind = KindToolError
	te := toolError(tr, r.Text)
	if te == nil {
		r.Detail = `tool error without an {"error":{"code"}} envelope: ` + Snippet([]byte(r.Text))
		return r
	}
	r.ToolError, r.Code = te, string(te.Code)
	r.Detail = string(te.Code) + ": " + te.Message
	return r
}

// toolError finds the error envelope of a failed result: in _meta first
// (where the backend puts it for programmatic clients), then in the JSON
// text content, then in structuredContent, where builds before the
// envelope left structuredContent carried it.
func toolError(tr toolResult, text string) *mcpwire.ToolError {
	for _, src := range []json.RawMessage{tr.Meta[mcpwire.ErrorMetaKey], json.RawMessage(text), tr.StructuredContent} {
		var env mcpwire.ErrorEnvelope
		if len(src) > 0 && json.Unmarshal(src, &env) == nil && env.Error != nil && env.Error.Code != "" {
			return env.Error
		}
	}
	return nil
}

// response finds the JSON-RPC response to wantID in a body; notifications
// and requests on an event stream before it are skipped. A response with
// another id is an error: it answers someone else's request.
func response(wantID uint64, contentType string, body []byte) (*rpcResponse, error) {
	msgs, err := Messages(contentType, body)
	if err != nil {
		return nil, err
	}
	want := strconv.FormatUint(wantID, 10)
	for _, m := range msgs {
		var r rpcResponse
		if json.Unmarshal(m, &r) != nil || (r.Result == nil && r.Error == nil) {
			continue
		}
		got := string(bytes.TrimSpace(r.ID))
		// A server that could not read the request answers an error with
		// id null; on a POST of its own, that error is ours.
		if got != want && !(r.Error != nil && (got == "null" || got == "")) {
			return nil, fmt.Errorf("response id %s, want %s", got, want)
		}
		return &r, nil
	}
	return nil, fmt.Errorf("no JSON-RPC response in body: %s", Snippet(body))
}

// Messages splits a Streamable HTTP answer into JSON-RPC messages: the body
// itself (or its elements, for a batch) for application/json, the data of
// each event for text/event-stream. A body without a content type is
// sniffed.
func Messages(contentType string, body []byte) ([]json.RawMessage, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "" {
		// SSE bodies start with a field name or a comment.
		t := bytes.TrimLeft(body, " \r\n")
		for _, p := range []string{"data:", "event:", "id:", ":"} {
			if bytes.HasPrefix(t, []byte(p)) {
				mt = "text/event-stream"
				break
			}
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
			return nil, fmt.Errorf("body is not JSON: %s", Snippet(t))
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
		return nil, fmt.Errorf("event stream without data: %s", Snippet(body))
	}
	return msgs, nil
}
