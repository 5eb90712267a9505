// Package verify holds the probes that prove a running mcp-backend (or a
// tunnel in front of one) serves: /healthz, /readyz and real MCP tool calls
// over plain HTTP JSON-RPC. Canary, install, cutover and the watchdog share
// them, so "verified" means the same thing everywhere.
package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Client runs probes. The zero value (and a nil *Client) uses
// http.DefaultClient, no token and DefaultCheckTimeout.
type Client struct {
	// HTTP is the client used; nil means http.DefaultClient. Deadlines come
	// from the context of each call.
	HTTP *http.Client
	// Token, when set, is sent as "Authorization: Bearer TOKEN".
	Token string
	// CheckTimeout bounds each check of Backend and Tunnel when ctx has a
	// later deadline (or none); DefaultCheckTimeout when zero.
	CheckTimeout time.Duration
}

// DefaultCheckTimeout is Client.CheckTimeout when zero.
const DefaultCheckTimeout = 10 * time.Second

func (c *Client) checkTimeout() time.Duration {
	if c == nil || c.CheckTimeout <= 0 {
		return DefaultCheckTimeout
	}
	return c.CheckTimeout
}

// mcp is the MCP client with this client's transport and token.
func (c *Client) mcp() *mcpclient.Client {
	if c == nil {
		return &mcpclient.Client{}
	}
	return &mcpclient.Client{HTTP: c.HTTP, Token: c.Token}
}

// Healthz GETs baseURL/healthz and returns the status code and body. err is
// set only when no HTTP answer arrived.
func Healthz(ctx context.Context, baseURL string) (int, []byte, error) {
	return (&Client{}).Healthz(ctx, baseURL)
}

// Readyz GETs baseURL/readyz and returns the status code and body.
func Readyz(ctx context.Context, baseURL string) (int, []byte, error) {
	return (&Client{}).Readyz(ctx, baseURL)
}

// CallTool calls an MCP tool, see (*Client).CallTool.
func CallTool(ctx context.Context, baseURL, tool string, args any) (json.RawMessage, string, error) {
	return (&Client{}).CallTool(ctx, baseURL, tool, args)
}

// Healthz GETs baseURL/healthz.
func (c *Client) Healthz(ctx context.Context, baseURL string) (int, []byte, error) {
	return c.mcp().Get(ctx, baseURL, "/healthz")
}

// Readyz GETs baseURL/readyz.
func (c *Client) Readyz(ctx context.Context, baseURL string) (int, []byte, error) {
	return c.mcp().Get(ctx, baseURL, "/readyz")
}

// CallTool POSTs a JSON-RPC tools/call to baseURL/mcp and returns the tool's
// JSON result (its structured content, or its JSON text content). A tool
// failure (isError) is not an error of the call: it returns toolErrCode
// (e.g. "OVERLOADED"; "UNKNOWN" when the failure carries no code) and the
// error envelope. err reports transport, HTTP and JSON-RPC failures, and an
// answer that cannot be parsed.
func (c *Client) CallTool(ctx context.Context, baseURL, tool string, args any) (result json.RawMessage, toolErrCode string, err error) {
	r := c.mcp().CallTool(ctx, baseURL, tool, args)
	switch r.Kind {
	case mcpclient.KindOK:
		return r.Payload(), "", nil
	case mcpclient.KindToolError:
		if r.Code == "" {
			return r.Payload(), "UNKNOWN", nil
		}
		return r.Payload(), r.Code, nil
	}
	return nil, "", fmt.Errorf("call %s: %s", tool, r.Detail)
}

func snippet(b []byte) string { return mcpclient.Snippet(b) }

// Check is one named probe of a report.
type Check struct {
	Name       string        `json:"name"`
	OK         bool          `json:"ok"`
	Err        string        `json:"error,omitempty"`
	Duration   time.Duration `json:"-"`
	DurationMs float64       `json:"durationMs"`
}

// Report is the outcome of a series of checks against one target.
type Report struct {
	Target string  `json:"target"`
	Checks []Check `json:"checks"`
	// Version and Build are what system.info reported, when it answered.
	Version string `json:"version,omitempty"`
	Build   string `json:"build,omitempty"`
}

// OK is true when there is at least one check and all passed.
func (r *Report) OK() bool {
	if len(r.Checks) == 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Failed returns the failed checks.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Err is nil when OK, else an error naming the target and each failed check.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	if len(r.Checks) == 0 {
		return fmt.Errorf("verify %s: no checks ran", r.Target)
	}
	var parts []string
	for _, c := range r.Failed() {
		parts = append(parts, c.Name+": "+c.Err)
	}
	return fmt.Errorf("verify %s: %s", r.Target, strings.Join(parts, "; "))
}

// Check returns the check called name, or nil.
func (r *Report) Check(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

func (r *Report) run(ctx context.Context, timeout time.Duration, name string, f func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	d := time.Since(start)
	c := Check{Name: name, OK: err == nil, Duration: d, DurationMs: float64(d.Microseconds()) / 1000}
	if err != nil {
		c.Err = err.Error()
	}
	r.Checks = append(r.Checks, c)
}

// Expect is what Backend requires of system.info; empty fields are not
// checked.
type Expect struct {
	Version string
	Digest  string // "sha256:<hex>"
}

// Check names used in reports.
const (
	CheckHealthz    = "healthz"
	CheckReadyz     = "readyz"
	CheckSystemInfo = "system.info"
	CheckShellExec  = "shell.exec"
	CheckFileList   = "file.list"
)

// Backend verifies, with a zero Client, a backend at baseURL: /healthz 200, /readyz 200,
// system.info (with the expected version and build when given), a shell.exec
// echo whose stdout comes back, and file.list of "/". Every check runs, so
// the report names everything that is wrong.
func Backend(ctx context.Context, baseURL string, want Expect) *Report {
	return (&Client{}).Backend(ctx, baseURL, want)
}

// Tunnel verifies, with a zero Client, a tunnel URL end to end: /readyz 200 and a shell.exec
// echo through it.
func Tunnel(ctx context.Context, tunnelURL string) *Report {
	return (&Client{}).Tunnel(ctx, tunnelURL)
}

// Backend is the package-level Backend with this client.
func (c *Client) Backend(ctx context.Context, baseURL string, want Expect) *Report {
	r := &Report{Target: baseURL}
	r.run(ctx, c.checkTimeout(), CheckHealthz, func(ctx context.Context) error { return c.expect200(ctx, baseURL, "/healthz") })
	r.run(ctx, c.checkTimeout(), CheckReadyz, func(ctx context.Context) error { return c.expect200(ctx, baseURL, "/readyz") })
	r.run(ctx, c.checkTimeout(), CheckSystemInfo, func(ctx context.Context) error {
		v, b, err := c.SystemInfo(ctx, baseURL)
		r.Version, r.Build = v, b
		if err != nil {
			return err
		}
		if want.Version != "" && v != want.Version {
			return fmt.Errorf("backend.version is %q, want %q", v, want.Version)
		}
		if want.Digest != "" && b != want.Digest {
			return fmt.Errorf("backend.build is %q, want %q", b, want.Digest)
		}
		return nil
	})
	r.run(ctx, c.checkTimeout(), CheckShellExec, func(ctx context.Context) error { return c.ShellEcho(ctx, baseURL) })
	r.run(ctx, c.checkTimeout(), CheckFileList, func(ctx context.Context) error {
		sc, code, err := c.CallTool(ctx, baseURL, mcpwire.ToolFileList, map[string]any{"path": "/", "limit": 10})
		if err != nil {
			return err
		}
		if code != "" {
			return fmt.Errorf("file.list failed with %s: %s", code, snippet(sc))
		}
		var res struct {
			Path    *string           `json:"path"`
			Entries []json.RawMessage `json:"entries"`
		}
		if err := json.Unmarshal(sc, &res); err != nil || res.Path == nil {
			return fmt.Errorf("file.list result has no path: %s", snippet(sc))
		}
		if len(res.Entries) == 0 {
			return errors.New(`file.list of "/" returned no entries`)
		}
		return nil
	})
	return r
}

// Tunnel is the package-level Tunnel with this client.
func (c *Client) Tunnel(ctx context.Context, tunnelURL string) *Report {
	r := &Report{Target: tunnelURL}
	r.run(ctx, c.checkTimeout(), CheckReadyz, func(ctx context.Context) error { return c.expect200(ctx, tunnelURL, "/readyz") })
	r.run(ctx, c.checkTimeout(), CheckShellExec, func(ctx context.Context) error { return c.ShellEcho(ctx, tunnelURL) })
	return r
}

func (c *Client) expect200(ctx context.Context, baseURL, path string) error {
	code, body, err := c.mcp().Get(ctx, baseURL, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d, want 200: %s", path, code, snippet(body))
	}
	return nil
}

// SystemInfo calls system.info and returns backend.version and backend.build.
func (c *Client) SystemInfo(ctx context.Context, baseURL string) (version, build string, err error) {
	sc, code, err := c.CallTool(ctx, baseURL, mcpwire.ToolSystemInfo, nil)
	if err != nil {
		return "", "", err
	}
	if code != "" {
		return "", "", fmt.Errorf("system.info failed with %s: %s", code, snippet(sc))
	}
	var res struct {
		Backend *struct {
			Version string `json:"version"`
			Build   string `json:"build"`
		} `json:"backend"`
	}
	if err := json.Unmarshal(sc, &res); err != nil || res.Backend == nil {
		return "", "", fmt.Errorf("system.info result has no backend object: %s", snippet(sc))
	}
	return res.Backend.Version, res.Backend.Build, nil
}

// ShellEcho runs an echo of a fresh token through shell.exec and requires
// exit code 0 and the token on stdout.
func (c *Client) ShellEcho(ctx context.Context, baseURL string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := "mcpctl-verify-" + hex.EncodeToString(b[:])
	sc, code, err := c.CallTool(ctx, baseURL, mcpwire.ToolShellExec, map[string]any{"command": "echo " + token, "timeoutMs": 5000})
	if err != nil {
		return err
	}
	if code != "" {
		return fmt.Errorf("shell.exec failed with %s: %s", code, snippet(sc))
	}
	var res mcpwire.ShellResult
	if err := json.Unmarshal(sc, &res); err != nil {
		return fmt.Errorf("shell.exec result is not an object: %s", snippet(sc))
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		return fmt.Errorf("shell.exec of echo: exit code %v, want 0", fmtExit(res.ExitCode))
	}
	if strings.TrimSpace(res.Stdout) != token {
		return fmt.Errorf("shell.exec of echo: stdout %q, want %q", snippet([]byte(res.Stdout)), token)
	}
	return nil
}

func fmtExit(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
