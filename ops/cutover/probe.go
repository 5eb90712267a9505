package cutover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Prober checks a backend, directly or through a tunnel, at a base URL such as
// "http://127.0.0.1:3210". It is a minimal private stand-in for the shared
// verify probes, kept to what cutover and rollback need.
type Prober struct {
	// Timeout bounds each probe; 5s when zero.
	Timeout time.Duration
	// Client is the HTTP client; a fresh one without keep-alives when nil, so
	// a probe never reuses a connection to a process that has gone.
	Client *http.Client
}

func (p *Prober) client() *http.Client {
	if p != nil && p.Client != nil {
		return p.Client
	}
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
}

func (p *Prober) timeout() time.Duration {
	if p != nil && p.Timeout > 0 {
		return p.Timeout
	}
	return 5 * time.Second
}

// Get requests base+path and fails unless it answers 200.
func (p *Prober) Get(ctx context.Context, base, path string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	resp, err := p.client().Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: status %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Healthz probes /healthz.
func (p *Prober) Healthz(ctx context.Context, base string) error { return p.Get(ctx, base, "/healthz") }

// Readyz probes /readyz.
func (p *Prober) Readyz(ctx context.Context, base string) error { return p.Get(ctx, base, "/readyz") }

// CallTool calls one MCP tool at base+"/mcp" and returns its structured
// result; a tool error result is an error.
func (p *Prober) CallTool(ctx context.Context, base, name string, args any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpctl-verify", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: strings.TrimRight(base, "/") + "/mcp", HTTPClient: p.client(),
		MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	defer s.Close()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, fmt.Errorf("%s: result: %w", name, err)
	}
	if res.IsError {
		return nil, fmt.Errorf("%s: tool error: %s", name, raw)
	}
	return raw, nil
}

// Info calls system.info and returns the backend's version and build digest.
func (p *Prober) Info(ctx context.Context, base string) (version, digest string, err error) {
	raw, err := p.CallTool(ctx, base, "system.info", map[string]any{})
	if err != nil {
		return "", "", err
	}
	var r struct {
		Backend struct {
			Version string `json:"version"`
			Build   string `json:"build"`
		} `json:"backend"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", "", fmt.Errorf("system.info: %w", err)
	}
	return r.Backend.Version, r.Backend.Build, nil
}

// Shell runs a harmless command with shell.exec and checks its output end to
// end.
func (p *Prober) Shell(ctx context.Context, base string) error {
	const token = "mcpctl-verify-ok"
	raw, err := p.CallTool(ctx, base, "shell.exec", map[string]any{"command": "echo " + token, "timeoutMs": 5000})
	if err != nil {
		return err
	}
	var r struct {
		ExitCode *int   `json:"exitCode"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("shell.exec: %w", err)
	}
	if r.ExitCode == nil || *r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != token {
		return fmt.Errorf("shell.exec: unexpected result %s", raw)
	}
	return nil
}
