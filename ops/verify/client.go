package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"
)

// ProbeTimeout bounds one call of OK when ctx has a later deadline (or none).
const ProbeTimeout = 5 * time.Second

// OK GETs baseURL+path and fails unless it answers 200 within ProbeTimeout.
func (c *Client) OK(ctx context.Context, baseURL, path string) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	return c.expect200(ctx, baseURL, path)
}

// ForBackend builds the client every mcpctl probe uses: no keep-alives, so a
// probe never reuses a connection to a process that has gone, and the
// backend's bearer token when its config (the file at configPath, the
// backend.config of mcpctl.json) sets auth.bearerTokenFile. A missing config
// file means no token: the backend then runs with its defaults.
func ForBackend(configPath string) (*Client, error) {
	c := &Client{HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}}
	if configPath == "" {
		return c, nil
	}
	b, err := os.ReadFile(configPath)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backend config %s: %w", configPath, err)
	}
	var cfg struct {
		Auth struct {
			BearerTokenFile string `json:"bearerTokenFile"`
		} `json:"auth"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("backend config %s: not a JSON object: %w", configPath, err)
	}
	if cfg.Auth.BearerTokenFile == "" {
		return c, nil
	}
	tok, err := os.ReadFile(cfg.Auth.BearerTokenFile)
	if err != nil {
		return nil, fmt.Errorf("backend config %s: auth.bearerTokenFile: %w", configPath, err)
	}
	c.Token = strings.TrimSpace(string(tok))
	if c.Token == "" {
		return nil, fmt.Errorf("backend config %s: auth.bearerTokenFile %s is empty, want the token the backend checks", configPath, cfg.Auth.BearerTokenFile)
	}
	return c, nil
}

// Metrics GETs baseURL/metrics as JSON (the admission snapshot); like
// /mcp it needs the bearer token when the backend has one.
func (c *Client) Metrics(ctx context.Context, baseURL string) (int, []byte, error) {
	return c.mcp().Get(ctx, baseURL, "/metrics")
}
