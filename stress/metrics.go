package stress

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// checkLimits rejects limits no backend would run with: the stress derives
// its load from them.
func checkLimits(l mcpwire.Limits) error {
	if l.MaxActive <= 0 || l.MaxShell <= 0 || l.MaxNonControl <= 0 || l.MaxQueue < 0 || l.QueueWaitMs <= 0 {
		return fmt.Errorf("implausible limits in /metrics: %+v (want maxActive, maxNonControl, maxShell, queueWaitMs > 0 and maxQueue >= 0)", l)
	}
	return nil
}

// Client fetches the backend's observation endpoints.
type Client struct {
	base string
	mcp  *mcpclient.Client
}

// NewClient returns a client for base (http://host:port). Its own
// connection pool keeps samplers independent of the attack's.
func NewClient(base string, timeout time.Duration) *Client {
	return &Client{
		base: base,
		mcp:  &mcpclient.Client{HTTP: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}},
	}
}

// Metrics fetches GET /metrics.
func (c *Client) Metrics(ctx context.Context) (mcpwire.Metrics, error) {
	return c.mcp.Metrics(ctx, c.base)
}

// Health fetches GET /healthz and returns its status code.
func (c *Client) Health(ctx context.Context) (int, error) {
	status, _, err := c.mcp.Get(ctx, c.base, "/healthz")
	if status != 0 {
		return status, nil // a status arrived; a truncated body does not matter
	}
	return 0, err
}

// Close drops idle connections.
func (c *Client) Close() { c.mcp.HTTP.CloseIdleConnections() }
