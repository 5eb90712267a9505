package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// authServer is a real authorization server (oidc-provider, run by node
// from testdata/oauth) with a second issuer that signs with the same key.
type authServer struct {
	Issuer      string `json:"issuer"`
	OtherIssuer string `json:"otherIssuer"`
}

// oauthTestdata is the node project of the OAuth tests.
func oauthTestdata(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "testdata", "oauth"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// needNode skips the test when node or the npm packages cannot be had,
// and fails it instead under CI=true, where everything must run.
func needNode(t testing.TB) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node is not installed: %v", err)
	}
	dir := oauthTestdata(t)
	if err := npmCI(dir); err != nil {
		unavailable("npm ci in %s: %v", dir, err)
	}
	return node
}

var npmOnce sync.Mutex

// npmCI installs the locked packages once node_modules is missing or older
// than the lock file. A file lock keeps two test binaries from installing
// into the same directory at once.
func npmCI(dir string) error {
	npmOnce.Lock()
	defer npmOnce.Unlock()
	lf, err := os.OpenFile(filepath.Join(os.TempDir(), "mcp-backend-oauth-npm.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	// npm writes this file last, so its presence means a finished install.
	if mods, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !mods.ModTime().Before(lock.ModTime()) {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return err
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.New(err.Error() + ": " + string(out))
	}
	return nil
}

// startAuthServer runs the authorization server for these resources until
// the test ends.
func startAuthServer(t testing.TB, resources ...string) *authServer {
	t.Helper()
	node := needNode(t)
	args, _ := json.Marshal(map[string]any{"resources": resources})
	cmd := exec.Command(node, "server.mjs", string(args))
	cmd.Dir = oauthTestdata(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the server exits when its stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	type first struct {
		line []byte
		err  error
	}
	got := make(chan first, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		got <- first{line, err}
	}()
	var line []byte
	select {
	case f := <-got:
		if f.err != nil {
			t.Fatalf("authorization server did not start: %v; stderr: %s", f.err, stderr.String())
		}
		line = f.line
	case <-time.After(2 * time.Minute):
		t.Fatalf("authorization server said nothing in 2 minutes; stderr: %s", stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	var as authServer
	if err := json.Unmarshal(line, &as); err != nil || as.Issuer == "" {
		t.Fatalf("authorization server said %q: %v", line, err)
	}
	return &as
}

// String is what was written so far (w must be a fmt.Stringer, such as a
// *bytes.Buffer).
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(fmt.Stringer).String()
}

// startTunnel forwards a loopback port to target byte for byte, as the
// tunnels' local ends do, and returns its address.
func startTunnel(t testing.TB, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				d, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer d.Close()
				go func() { io.Copy(d, c); d.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, d)
			}()
		}
	}()
	return ln.Addr().String()
}
