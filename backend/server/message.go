package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// maxIDBytes bounds a request id, which every answer echoes.
const maxIDBytes = 256

// rpcMessage is what the HTTP layer needs of a JSON-RPC message.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		Name      string                     `json:"name"`
		RequestID json.RawMessage            `json:"requestId"` // of notifications/cancelled
		Meta      map[string]json.RawMessage `json:"_meta"`     // exact keys, as the SDK reads them
	} `json:"params"`
}

// metaString is a string value of the message's params._meta, "" when the
// key is absent or not a string (the SDK's reading too).
func (m *rpcMessage) metaString(key string) string {
	var v string
	if raw, ok := m.Params.Meta[key]; !ok || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// parseJSONRPC is step 3 of the call chain, for an HTTP body and a stdio
// line alike: the message, or a JSON-RPC error code and message for bytes
// that are not one JSON-RPC message the SDK reads as we do.
func parseJSONRPC(body []byte) (rpcMessage, int, string) { return parseMessage(body, true) }

// parseMessage is parseJSONRPC with or without the frame check, which only
// a message read twice needs (HTTP's intake and the SDK; over stdio the
// SDK alone reads it, and the arguments' keys are tools.Args's to refuse).
func parseMessage(body []byte, frame bool) (rpcMessage, int, string) {
	var m rpcMessage
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		// Each answer of a batch would be trimmed to the budget on its
		// own, not the whole; MCP dropped batching in 2025-06-18.
		return m, -32600, "invalid request: JSON-RPC batches are not supported; send one message per request"
	}
	if err := json.Unmarshal(body, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return m, -32700, "parse error: the body is not valid JSON"
		}
		return m, -32600, "invalid request: " + err.Error()
	}
	if err := checkFrame(body); frame && err != nil {
		// The intake and the SDK must read the same call from these bytes.
		return rpcMessage{}, -32600, "invalid request: " + err.Error()
	}
	if m.JSONRPC != "2.0" {
		return m, -32600, `invalid request: want a JSON-RPC 2.0 object with "jsonrpc":"2.0"`
	}
	if m.Method == "" && (len(m.ID) == 0 || string(m.ID) == "null") {
		// Neither a request nor a response: the SDK would end a stdio
		// session on it.
		return m, -32600, "invalid request: a message needs a method, or an id if it is a response"
	}
	if len(m.ID) > maxIDBytes {
		// The id is echoed in the answer, outside the result's budget.
		return rpcMessage{}, -32600, fmt.Sprintf("invalid request: id longer than %d bytes", maxIDBytes)
	}
	if why := validID(m.ID); why != "" {
		// Answering under another id than the one sent would be worse
		// than refusing: the client could match it to another call.
		return rpcMessage{}, -32600, "invalid request: " + why
	}
	return m, 0, ""
}

// writeToolResult answers a tools/call at once with an encoded tool result
// (a shed or a restart), without the cost of a server session.
func (s *Server) writeToolResult(w http.ResponseWriter, id json.RawMessage, result []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	buf.Grow(len(result) + len(id) + 40)
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(id)
	buf.WriteString(`,"result":`)
	buf.Write(result)
	buf.WriteString("}\n")
	_, _ = w.Write(buf.Bytes())
}
