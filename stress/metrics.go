package stress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Metrics is the JSON of GET /metrics (DESIGN.md §3).
type Metrics struct {
	Limits   Limits   `json:"limits"`
	Active   Active   `json:"active"`
	Queued   Queued   `json:"queued"`
	Peak     Peak     `json:"peak"`
	Counters Counters `json:"counters"`
}

// Limits are the configured admission limits.
type Limits struct {
	MaxActive       int `json:"maxActive"`
	ReservedControl int `json:"reservedControl"`
	MaxNonControl   int `json:"maxNonControl"`
	MaxShell        int `json:"maxShell"`
	MaxQueue        int `json:"maxQueue"`
	QueueWaitMs     int `json:"queueWaitMs"`
}

// QueueWait is QueueWaitMs as a duration.
func (l Limits) QueueWait() time.Duration { return time.Duration(l.QueueWaitMs) * time.Millisecond }

// Validate rejects limits no backend would run with: the stress derives its
// load from them.
func (l Limits) Validate() error {
	if l.MaxActive <= 0 || l.MaxShell <= 0 || l.MaxNonControl <= 0 || l.MaxQueue < 0 || l.QueueWaitMs <= 0 {
		return fmt.Errorf("implausible limits in /metrics: %+v (want maxActive, maxNonControl, maxShell, queueWaitMs > 0 and maxQueue >= 0)", l)
	}
	return nil
}

// Active counts operations holding slots.
type Active struct {
	Total      int `json:"total"`
	Control    int `json:"control"`
	NonControl int `json:"nonControl"`
	Shell      int `json:"shell"`
}

// Queued counts waiting operations.
type Queued struct {
	Total      int `json:"total"`
	Control    int `json:"control"`
	NonControl int `json:"nonControl"`
}

// Peak holds the high-water marks since the process started.
type Peak struct {
	Active     int `json:"active"`
	NonControl int `json:"nonControl"`
	Shell      int `json:"shell"`
	Queued     int `json:"queued"`
}

// Counters are cumulative admission counts.
type Counters struct {
	Accepted  uint64 `json:"accepted"`
	Completed uint64 `json:"completed"`
	Rejected  uint64 `json:"rejected"`
	TimedOut  uint64 `json:"timedOut"`
	Cancelled uint64 `json:"cancelled"`
}

// Seen is the number of operations admission decided on: each is accepted,
// rejected, timed out or cancelled exactly once.
func (c Counters) Seen() uint64 { return c.Accepted + c.Rejected + c.TimedOut + c.Cancelled }

// Sub returns c - o, field by field.
func (c Counters) Sub(o Counters) Counters {
	return Counters{
		Accepted:  c.Accepted - o.Accepted,
		Completed: c.Completed - o.Completed,
		Rejected:  c.Rejected - o.Rejected,
		TimedOut:  c.TimedOut - o.TimedOut,
		Cancelled: c.Cancelled - o.Cancelled,
	}
}

// Idle says nothing holds or waits for a slot.
func (m Metrics) Idle() bool { return m.Active.Total == 0 && m.Queued.Total == 0 }

// Client fetches the backend's observation endpoints.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for base (http://host:port). Its own
// connection pool keeps samplers independent of the attack's.
func NewClient(base string, timeout time.Duration) *Client {
	return &Client{
		base: strings.TrimSuffix(base, "/"),
		http: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
	}
}

// Metrics fetches GET /metrics.
func (c *Client) Metrics(ctx context.Context) (Metrics, error) {
	var m Metrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return m, fmt.Errorf("metrics request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return m, fmt.Errorf("get /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return m, fmt.Errorf("read /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("get /metrics: HTTP %d: %s", resp.StatusCode, snippet(body))
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("decode /metrics: %w", err)
	}
	return m, nil
}

// Health fetches GET /healthz and returns its status code.
func (c *Client) Health(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/healthz", nil)
	if err != nil {
		return 0, fmt.Errorf("healthz request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("get /healthz: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }
