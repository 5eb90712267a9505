package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// writeToken writes a token file with the given content and mode.
func writeToken(t testing.TB, tok string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe runs the real binary's serve and reports whether it answered
// /healthz (it is then stopped with SIGTERM) or exited, with its code and
// stderr.
func startServe(t *testing.T, cfgPath string, addr string) (served bool, code int, stderr string) {
	t.Helper()
	var errb syncBuffer
	c := exec.Command(binary, "serve", "--config", cfgPath)
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	t.Cleanup(func() { c.Process.Kill(); <-exited })
	proctest.Eventually(t, "exit or a listening server", func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			served = true
		}
		return err == nil
	})
	if served {
		c.Process.Signal(syscall.SIGTERM)
	}
	<-exited
	return served, c.ProcessState.ExitCode(), errb.String()
}

// TestCheckConfigAgreesWithServe: every config serve refuses before it
// listens, check-config refuses with the same code and message; a config
// check-config passes, serve starts with. Before, check-config passed all of
// these bad ones.
func TestCheckConfigAgreesWithServe(t *testing.T) {
	good := strings.Repeat("t", 16)
	tests := []struct {
		name  string
		body  func(t *testing.T, addr string) string
		want  string // "" when both must accept
		serve bool   // bad case reaches serve's preflight (non-loopback cannot be bound here)
	}{
		{"missing token file", func(t *testing.T, addr string) string {
			return fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q}}`, addr, filepath.Join(t.TempDir(), "absent"))
		}, "no such file or directory", true},
		{"token file mode 0644", func(t *testing.T, addr string) string {
			return fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q}}`, addr, writeToken(t, good, 0o644))
		}, "mode 0644 is group/world accessible", true},
		{"empty token", func(t *testing.T, addr string) string {
			return fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q}}`, addr, writeToken(t, "", 0o600))
		}, "token is 0 characters, want at least 16", true},
		{"short token", func(t *testing.T, addr string) string {
			return fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q}}`, addr, writeToken(t, "short", 0o600))
		}, "token is 5 characters, want at least 16", true},
		{"non-loopback listen without a token", func(t *testing.T, _ string) string {
			return `{"listen":"0.0.0.0:3210"}`
		}, `listen = "0.0.0.0:3210" is not loopback: set auth.bearerTokenFile`, false},
		{"good token", func(t *testing.T, addr string) string {
			return fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q}}`, addr, writeToken(t, good+"\n", 0o600))
		}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := proctest.FreeAddr(t)
			cfg := writeConfig(t, tc.body(t, addr))
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"mcp-backend", "check-config", "--config", cfg}, nil, &out, &errb)
			switch {
			case tc.want == "" && code != 0:
				t.Fatalf("check-config exit %d, want 0: %s", code, errb.String())
			case tc.want != "" && (code != 2 || !strings.Contains(errb.String(), tc.want)):
				t.Fatalf("check-config exit %d, want 2 and %q: %s", code, tc.want, errb.String())
			}
			if tc.want != "" && !tc.serve {
				// Binding 0.0.0.0 is not for a test: serve's refusal comes
				// from the same function before any socket, run in-process.
				code := run(context.Background(), []string{"mcp-backend", "serve", "--config", cfg}, nil, &bytes.Buffer{}, &errb)
				if code != 2 || !strings.Contains(errb.String(), tc.want) {
					t.Fatalf("serve exit %d, want 2 and %q: %s", code, tc.want, errb.String())
				}
				return
			}
			served, scode, stderr := startServe(t, cfg, addr)
			switch {
			case tc.want == "" && (!served || scode != 0):
				t.Fatalf("serve did not serve (exit %d): %s", scode, stderr)
			case tc.want != "" && (served || scode != 2 || !strings.Contains(stderr, tc.want)):
				t.Fatalf("serve served=%v exit %d, want exit 2 and %q: %s", served, scode, tc.want, stderr)
			}
		})
	}
}

// TestExampleConfigPassesBoth: the example in testdata passes check-config
// and serve starts with it, once its token path names a real token file
// and its OAuth issuer a loopback address (tests send nothing off the host).
func TestExampleConfigPassesBoth(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "examples", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	addr := proctest.FreeAddr(t)
	m["listen"] = addr
	auth := m["auth"].(map[string]any)
	auth["bearerTokenFile"] = writeToken(t, strings.Repeat("e", 32), 0o600)
	auth["oauth"].(map[string]any)["issuer"] = "http://" + proctest.FreeAddr(t)
	body, _ := json.Marshal(m)
	cfg := writeConfig(t, string(body))
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"mcp-backend", "check-config", "--config", cfg}, nil, &out, &errb); code != 0 {
		t.Fatalf("check-config exit %d: %s", code, errb.String())
	}
	if served, code, stderr := startServe(t, cfg, addr); !served || code != 0 {
		t.Fatalf("serve served=%v exit %d: %s", served, code, stderr)
	}
	// Unchanged, on a host without its token file, both refuse alike.
	orig := filepath.Join("..", "..", "testdata", "examples", "config.json")
	if _, err := os.Stat("/etc/mcp-backend/token"); err == nil {
		t.Skip("this host has /etc/mcp-backend/token")
	}
	for _, cmd := range []string{"check-config", "serve"} {
		errb.Reset()
		if code := run(context.Background(), []string{"mcp-backend", cmd, "--config", orig}, nil, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "auth.bearerTokenFile") {
			t.Fatalf("%s of the unchanged example: exit %d, %s", cmd, code, errb.String())
		}
	}
}
