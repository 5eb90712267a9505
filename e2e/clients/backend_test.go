package clients

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

var (
	binary     string // the real mcp-backend, built once
	clientsDir string // testdata/clients: the pinned Node clients
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcp-backend-clients")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mcp-backend")
	out, err := exec.Command("go", "build", "-o", binary, "../../cmd/mcp-backend").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	clientsDir, err = filepath.Abs("../../testdata/clients")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node returns the pinned Node (>= 22) of testdata/clients. When the clients
// are not installed it fails under CI and skips elsewhere, saying why.
func node(t testing.TB) string {
	t.Helper()
	why := installed()
	if why == "" {
		return filepath.Join(clientsDir, "node_modules", ".bin", "node")
	}
	msg := why + "; run scripts/ensure-deps.sh (it runs npm ci in testdata/clients)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// installed says why the Node clients cannot run, or "" when they can: the
// stamp ensure-deps.sh writes after npm ci must match package-lock.json.
func installed() string {
	lock, err := os.ReadFile(filepath.Join(clientsDir, "package-lock.json"))
	if err != nil {
		return "testdata/clients/package-lock.json: " + err.Error()
	}
	if _, err := os.Stat(filepath.Join(clientsDir, "node_modules", ".bin", "node")); err != nil {
		return "the Node clients are not installed (no testdata/clients/node_modules/.bin/node)"
	}
	stamp, _ := os.ReadFile(filepath.Join(clientsDir, "node_modules", ".package-lock.sha256"))
	sum := sha256.Sum256(lock)
	if strings.TrimSpace(string(stamp)) != hex.EncodeToString(sum[:]) {
		return "testdata/clients/node_modules is stale (package-lock.json changed since npm ci)"
	}
	return ""
}

// backend is one real mcp-backend serve process.
type backend struct {
	t      testing.TB
	cfg    string
	addr   string
	url    string // the MCP endpoint
	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// startHTTP starts mcp-backend serve with the config body (JSON without
// listen) on a free loopback port.
func startHTTP(t testing.TB, cfgJSON string) *backend {
	t.Helper()
	b := &backend{t: t, addr: proctest.FreeAddr(t)}
	b.url = "http://" + b.addr + "/mcp"
	b.cfg = writeConfig(t, cfgJSON, b.addr)
	b.start()
	t.Cleanup(b.stop)
	return b
}

func writeConfig(t testing.TB, cfgJSON, listen string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(cfgJSON), &m); err != nil {
		t.Fatalf("test config: %v", err)
	}
	if listen != "" {
		m["listen"] = listen
	}
	b, _ := json.Marshal(m)
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *backend) start() {
	b.t.Helper()
	cmd := exec.Command(binary, "serve", "--config", b.cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.mu.Lock()
	b.cmd, b.stderr = cmd, &stderr
	b.mu.Unlock()
	proctest.Eventually(b.t, "mcp-backend to answer /healthz", func() bool {
		resp, err := http.Get("http://" + b.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (b *backend) stop() {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart stops the process and starts a new one on the same address, as
// a cutover does.
func (b *backend) restart() {
	b.t.Helper()
	b.stop()
	b.start()
}

// metrics reads /metrics into v.
func (b *backend) metrics(t testing.TB, v any) {
	t.Helper()
	resp, err := http.Get("http://" + b.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// stdioCommand is the command line a client spawns for the stdio transport.
func stdioCommand(t testing.TB, cfgJSON string) []string {
	return []string{binary, "stdio", "--config", writeConfig(t, cfgJSON, "")}
}

// runNode runs a Node program of testdata/clients with args and env, calls
// onLine for every stdout line (w writes to its stdin), and returns stdout,
// stderr and the exit error.
func runNode(t testing.TB, env []string, onLine func(line string, stdin io.Writer), args ...string) (string, string, error) {
	t.Helper()
	// A client that hangs must not hold the test until go test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node(t), args...)
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = clientsDir
	// The pinned node first on PATH: the clients spawn "node" themselves.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(clientsDir, "node_modules", ".bin")+":"+os.Getenv("PATH"), "NO_COLOR=1")
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(sc.Text(), stdin)
		}
	}
	stdin.Close()
	err = cmd.Wait()
	return out.String(), stderr.String(), err
}

// lastJSON decodes the last line of out that is a JSON object.
func lastJSON(out string, v any) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			return json.Unmarshal([]byte(lines[i]), v)
		}
	}
	return fmt.Errorf("no JSON report in output: %.500s", out)
}
