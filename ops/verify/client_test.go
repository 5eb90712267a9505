package verify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/server"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestForBackendSendsTheToken runs the real backend with a bearer token and
// probes it with the client built from its config file.
func TestForBackendSendsTheToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, "0123456789abcdef0123\n")
	cfg := config.Default()
	cfg.Auth.BearerTokenFile = tokenFile
	srv, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	url := serve(t, srv.Handler())

	withAuth := filepath.Join(dir, "config.json")
	writeFile(t, withAuth, `{"listen":"127.0.0.1:1","auth":{"bearerTokenFile":"`+tokenFile+`"}}`)
	noAuth := filepath.Join(dir, "plain.json")
	writeFile(t, noAuth, `{"listen":"127.0.0.1:1"}`)
	tests := []struct {
		name   string
		config string
		wantOK bool
	}{
		{"config names the token file", withAuth, true},
		{"config without auth", noAuth, false},
		{"no config file", filepath.Join(dir, "absent.json"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ForBackend(tc.config)
			if err != nil {
				t.Fatal(err)
			}
			r := c.Backend(context.Background(), url, Expect{})
			if r.OK() != tc.wantOK {
				t.Fatalf("Backend OK = %v, want %v: %v", r.OK(), tc.wantOK, r.Err())
			}
			if err := c.OK(context.Background(), url, "/healthz"); err != nil {
				t.Fatalf("/healthz needs no token: %v", err)
			}
		})
	}
}

func TestForBackendErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, `[`)
	missingTok := filepath.Join(dir, "missing.json")
	writeFile(t, missingTok, `{"auth":{"bearerTokenFile":"`+filepath.Join(dir, "nope")+`"}}`)
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, " \n")
	emptyTok := filepath.Join(dir, "emptytok.json")
	writeFile(t, emptyTok, `{"auth":{"bearerTokenFile":"`+empty+`"}}`)
	tests := []struct{ name, config, want string }{
		{"not JSON", bad, "not a JSON object"},
		{"token file missing", missingTok, "auth.bearerTokenFile"},
		{"token file empty", emptyTok, "is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ForBackend(tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestCheckTimeoutIsPerClient: a check that never answers fails on the
// client's own CheckTimeout, and every other check still runs.
func TestCheckTimeoutIsPerClient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := &Client{CheckTimeout: 50 * time.Millisecond}
	rep := c.Tunnel(context.Background(), srv.URL)
	if len(rep.Checks) != 2 {
		t.Fatalf("%d checks, want 2 (every check runs)", len(rep.Checks))
	}
	for _, ch := range rep.Checks {
		if ch.OK || !strings.Contains(ch.Err, context.DeadlineExceeded.Error()) {
			t.Errorf("check %s: ok %v, err %q; want it cut by the client's CheckTimeout", ch.Name, ch.OK, ch.Err)
		}
	}
	if (&Client{}).checkTimeout() != DefaultCheckTimeout || (*Client)(nil).checkTimeout() != DefaultCheckTimeout {
		t.Error("a zero or nil Client does not use DefaultCheckTimeout")
	}
}
