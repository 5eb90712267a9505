// Package mcpclient is the small MCP client mcpctl's probes, the stress and
// the demo share: stateless Streamable HTTP (one POST per JSON-RPC request,
// answered as JSON or as an event stream), an optional bearer token, and one
// classification of what a tools/call came to: a result, a tool error with
// its code, a JSON-RPC error, an HTTP error, a transport error, or an answer
// that is none of these. It speaks the formats of package mcpwire and links
// nothing of the backend.
package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// MaxBody bounds what the client reads of one answer: the backend caps a
// response at limits.responseBytes (6 MiB by default); a little more leaves
// room for framing.
const MaxBody = 8 << 20

// Client posts MCP requests. The zero value (and a nil *Client) uses
// http.DefaultClient and no token.
type Client struct {
	// HTTP is the client used; nil means http.DefaultClient. Deadlines come
	// from the context of each call.
	HTTP *http.Client
	// Token, when set, is sent as "Authorization: Bearer TOKEN".
	Token string
}

var lastID atomic.Uint64

// NextID returns a JSON-RPC request id unique in this process.
func NextID() uint64 { return lastID.Add(1) }

func (c *Client) http() *http.Client {
	if c == nil || c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

func (c *Client) token() string {
	if c == nil {
		return ""
	}
	return c.Token
}

// Header returns the headers of a POST to /mcp: JSON in, JSON or an event
// stream out, the protocol version, and the bearer token when token is set.
func Header(token string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set(mcpwire.ProtocolVersionHeader, mcpwire.ProtocolVersion)
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h
}

// Header is the package Header with this client's token.
func (c *Client) Header() http.Header { return Header(c.token()) }

// CallBody encodes a JSON-RPC tools/call request; nil args become {}.
func CallBody(id uint64, tool string, args any) ([]byte, error) {
	return CallBodyIn(id, tool, args, "")
}

// CallBodyIn is CallBody in a conversation: _meta["openai/session"], as
// ChatGPT names a conversation ("" for none).
func CallBodyIn(id uint64, tool string, args any, conversation string) ([]byte, error) {
	if args == nil {
		args = map[string]any{}
	}
	params := map[string]any{"name": tool, "arguments": args}
	if conversation != "" {
		params["_meta"] = map[string]any{mcpwire.MetaSession: conversation}
	}
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params,
	})
	if err != nil {
		return nil, fmt.Errorf("encode tools/call %s: %w", tool, err)
	}
	return b, nil
}

// CallTool POSTs a tools/call of tool to baseURL/mcp and classifies the
// answer. It never returns an error: every failure is a Result kind.
func (c *Client) CallTool(ctx context.Context, baseURL, tool string, args any) Result {
	return c.CallToolIn(ctx, baseURL, tool, args, "")
}

// CallToolIn is CallTool in a conversation of the caller's (none: "").
func (c *Client) CallToolIn(ctx context.Context, baseURL, tool string, args any, conversation string) Result {
	id := NextID()
	body, err := CallBodyIn(id, tool, args, conversation)
	if err != nil {
		return Result{Kind: KindTransport, Detail: err.Error()}
	}
	status, ctype, raw, err := c.post(ctx, baseURL, body)
	transportErr := ""
	if err != nil {
		transportErr = err.Error()
	}
	return Classify(id, status, transportErr, ctype, raw)
}

// ServerInfo is what initialize says about the server.
type ServerInfo struct {
	Name            string `json:"name"`
	Version         string `json:"version"`
	ProtocolVersion string `json:"-"`
}

// Initialize sends initialize (allowed, and harmless, on a stateless
// server) as clientName and returns the server's serverInfo and the protocol
// version it chose.
func (c *Client) Initialize(ctx context.Context, baseURL, clientName string) (ServerInfo, error) {
	id := NextID()
	body, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "initialize",
		"params": map[string]any{
			"protocolVersion": mcpwire.ProtocolVersion,
			"capabilities":    map[string]any{},
			"clientInfo":      map[string]any{"name": clientName, "version": "1"},
		},
	})
	if err != nil { // maps of strings always encode
		return ServerInfo{}, fmt.Errorf("initialize: %w", err)
	}
	status, ctype, raw, err := c.post(ctx, baseURL, body)
	if err != nil {
		return ServerInfo{}, fmt.Errorf("initialize: %w", err)
	}
	if status != http.StatusOK {
		return ServerInfo{}, fmt.Errorf("initialize: HTTP %d: %s", status, Snippet(raw))
	}
	msg, err := response(id, ctype, raw)
	if err != nil {
		return ServerInfo{}, fmt.Errorf("initialize: %w", err)
	}
	if msg.Error != nil {
		return ServerInfo{}, fmt.Errorf("initialize: JSON-RPC error %d: %s", msg.Error.Code, msg.Error.Message)
	}
	var res struct {
		ProtocolVersion string     `json:"protocolVersion"`
		ServerInfo      ServerInfo `json:"serverInfo"`
	}
	if err := json.Unmarshal(msg.Result, &res); err != nil {
		return ServerInfo{}, fmt.Errorf("initialize: result: %w", err)
	}
	res.ServerInfo.ProtocolVersion = res.ProtocolVersion
	return res.ServerInfo, nil
}

// post sends body to baseURL/mcp. status is 0 when no answer arrived; err
// with a status means the body could not be read.
func (c *Client) post(ctx context.Context, baseURL string, body []byte) (status int, contentType string, raw []byte, err error) {
	u := strings.TrimRight(baseURL, "/") + "/mcp"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, fmt.Errorf("post %s: %w", u, err)
	}
	req.Header = c.Header()
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return resp.StatusCode, resp.Header.Get("Content-Type"), raw, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), raw, nil
}

// Get GETs baseURL+path with the token and returns the status and body (at
// most MaxBody bytes). err is set only when no complete answer arrived.
func (c *Client) Get(ctx context.Context, baseURL, path string) (int, []byte, error) {
	u := strings.TrimRight(baseURL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("get %s: %w", u, err)
	}
	if t := c.token(); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return resp.StatusCode, body, fmt.Errorf("get %s: reading body: %w", u, err)
	}
	return resp.StatusCode, body, nil
}

// Metrics GETs baseURL/metrics and decodes the admission snapshot.
func (c *Client) Metrics(ctx context.Context, baseURL string) (mcpwire.Metrics, error) {
	var m mcpwire.Metrics
	status, body, err := c.Get(ctx, baseURL, "/metrics")
	if err != nil {
		return m, err
	}
	if status != http.StatusOK {
		return m, fmt.Errorf("get /metrics: HTTP %d: %s", status, Snippet(body))
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("decode /metrics: %w", err)
	}
	return m, nil
}

// Snippet is the start of b for an error message: trimmed, valid UTF-8, at
// most 160 bytes.
func Snippet(b []byte) string {
	const max = 160
	s := strings.ToValidUTF8(string(b[:min(len(b), max)]), "?")
	if len(b) > max {
		s += "..."
	}
	return strings.TrimSpace(s)
}
