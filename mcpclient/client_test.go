package mcpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/server"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// realBackend serves the real backend over a real HTTP listener; with a
// token, it requires it.
func realBackend(t testing.TB, token string) string {
	t.Helper()
	cfg := config.Default()
	if token != "" {
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Auth.BearerTokenFile = f
	}
	srv, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts.URL
}

// TestAgainstRealBackend goes through the real handler over real HTTP:
// every kind the backend can produce is classified as such.
func TestAgainstRealBackend(t *testing.T) {
	const token = "0123456789abcdef0123"
	url := realBackend(t, token)
	ctx := context.Background()
	c := &Client{Token: token}

	info, err := c.Initialize(ctx, url, "mcpclient-test")
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != buildinfo.Version || info.ProtocolVersion != mcpwire.ProtocolVersion {
		t.Fatalf("initialize: %+v, want version %q and protocol %q", info, buildinfo.Version, mcpwire.ProtocolVersion)
	}

	r := c.CallTool(ctx, url, mcpwire.ToolShellExec, map[string]any{"command": "echo hi"})
	if !r.OK() {
		t.Fatalf("shell.exec: %s %s", r.Kind, r.Detail)
	}
	if sh, err := r.Shell(); err != nil || sh.Stdout != "hi\n" {
		t.Fatalf("shell.exec result %+v (%v), want stdout %q", sh, err, "hi\n")
	}

	r = c.CallTool(ctx, url, mcpwire.ToolFileList, map[string]any{"path": "relative"})
	if r.Kind != KindToolError || r.Code != string(mcpwire.CodeInvalidArgument) || r.ToolError == nil || r.ToolError.Message == "" {
		t.Fatalf("file.list of a relative path: %s %q %+v, want a tool error INVALID_ARGUMENT with a message", r.Kind, r.Code, r.ToolError)
	}

	if r := c.CallTool(ctx, url, "no.such.tool", nil); r.Kind != KindRPCError && r.Kind != KindToolError {
		t.Fatalf("unknown tool: %s %s, want a JSON-RPC or tool error", r.Kind, r.Detail)
	}

	if r := (&Client{}).CallTool(ctx, url, mcpwire.ToolSystemInfo, nil); r.Kind != KindHTTPError || r.Code != "401" {
		t.Fatalf("without the token: %s %q, want http_error 401", r.Kind, r.Code)
	}
	if _, err := (&Client{}).Initialize(ctx, url, "mcpclient-test"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("initialize without the token: %v, want HTTP 401", err)
	}

	m, err := c.Metrics(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if m.Limits.MaxActive != 48 || m.Counters.Accepted < 2 || !m.Idle() {
		t.Fatalf("metrics %+v: want the default limits, the calls above accepted, and idle", m)
	}
}

// TestConcurrentCalls sends many calls at once through one client: each
// answer must match its own request (ids never collide).
func TestConcurrentCalls(t *testing.T) {
	url := realBackend(t, "")
	c := &Client{}
	var wg sync.WaitGroup
	errs := make(chan string, 32)
	for i := range 32 {
		wg.Go(func() {
			r := c.CallTool(context.Background(), url, mcpwire.ToolShellExec, map[string]any{"command": "echo " + strings.Repeat("x", i+1)})
			sh, err := r.Shell()
			if !r.OK() || err != nil || sh.Stdout != strings.Repeat("x", i+1)+"\n" {
				errs <- r.Detail
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("call failed or answered another request: %s", e)
	}
}

func TestTransportError(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	if r := (&Client{}).CallTool(context.Background(), url, mcpwire.ToolSystemInfo, nil); r.Kind != KindTransport {
		t.Fatalf("closed port: %s %s, want transport_error", r.Kind, r.Detail)
	}
}
