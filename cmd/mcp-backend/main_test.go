package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var binary string // the real mcp-backend, built once

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcp-backend-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mcp-backend")
	out, err := exec.Command("go", "build", "-ldflags", "-X github.com/overdeck/mcp-backend/internal/buildinfo.Version=v0.0.0-test", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeConfig(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckConfig(t *testing.T) {
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"empty object is valid", `{}`, 0, "ok"},
		{"no concurrency gets defaults", `{"listen":"127.0.0.1:4000"}`, 0, "ok"},
		{"bad maxShell named", `{"concurrency":{"maxShell":50}}`, 2, "concurrency.maxShell = 50: must be <= maxActive - reservedControl (40)"},
		{"unknown key", `{"concurency":{}}`, 2, `unknown key "concurency"`},
		{"bad files.deny named", `{"files":{"deny":["/etc/shadow","id_rsa"]}}`, 2, `files.deny[1] = "id_rsa": must be an absolute path pattern`},
		{"unknown files key", `{"files":{"allow":[]}}`, 2, `unknown key "allow" (in files`},
		{"policy rule that can never match", `{"policy":{"rules":[{"id":"x","action":"deny","tools":["file.read"],"commands":["rm"]}]}}`, 2, `policy.rules[0].tools[0] = "file.read": can never match`},
		{"unknown policy rule key", `{"policy":{"rules":[{"id":"x","action":"deny","command":["rm"]}]}}`, 2, `unknown key "command"`},
		{"policy rule valid", `{"policy":{"default":"ask","rules":[{"id":"no-rm","action":"deny","commands":["rm"]}]}}`, 0, "ok"},
		{"approver operator valid", `{"policy":{"rules":[{"id":"up","action":"ask","approver":"operator","commands":["apt-get *"]}]}}`, 0, "ok"},
		{"bad approver named", `{"policy":{"rules":[{"id":"up","action":"ask","approver":"admin","commands":["apt-get *"]}]}}`, 2, `policy.rules[0].approver = "admin": must be user`},
		{"approver on a deny rule", `{"policy":{"rules":[{"id":"no-rm","action":"deny","approver":"operator","commands":["rm"]}]}}`, 2, `policy.rules[0].approver = "operator": only an ask rule has an approver`},
		{"oauth principal of another issuer", `{"auth":{"oauth":{"issuer":"https://auth.example.com","resources":["https://mcp.example.com/mcp"]}},"policy":{"rules":[{"id":"ci","action":"allow","principals":[{"kind":"oauth","id":"https://other.example.com *"}]}]}}`, 2, `policy.rules[0].principals[0].id = "https://other.example.com *": can never match`},
		{"oauth principal of the issuer, any subject", `{"auth":{"oauth":{"issuer":"https://auth.example.com","resources":["https://mcp.example.com/mcp"]}},"policy":{"rules":[{"id":"ci","action":"allow","principals":[{"kind":"oauth","id":"https://auth.example.com *"}]}]}}`, 0, "ok"},
		{"bad subjectClaim", `{"auth":{"oauth":{"issuer":"https://auth.example.com","resources":["https://mcp.example.com/mcp"],"subjectClaim":"jti"}}}`, 2, `auth.oauth.subjectClaim = "jti"`},
		{"policy examples hold", `{"policy":{"default":"ask","rules":[{"id":"no-rm","action":"deny","commands":["rm"],
			"examples":{"match":[{"command":"sudo rm -rf /"},{"command":"ip netns exec a rm x"}],"notMatch":[{"command":"rmdir x"}]}}]}}`, 0, "ok"},
		{"policy match example not decided", `{"policy":{"default":"ask","rules":[{"id":"no-rm","action":"deny","commands":["rm"],
			"examples":{"match":[{"command":"unlink x"}]}}]}}`, 2, `policy.rules[0].examples.match[0] = {"command":"unlink x"}: rule no-rm must decide it, but it gets ask by rule policy.default`},
		{"policy notMatch example decided", `{"policy":{"default":"ask","rules":[{"id":"inspect","action":"allow","commands":["journalctl *"],
			"examples":{"notMatch":[{"command":"journalctl --vacuum-time=1s"}]}}]}}`, 2, `policy.rules[0].examples.notMatch[0] = {"command":"journalctl --vacuum-time=1s"}: rule inspect must not decide it, but it does`},
		{"policy example unknown key", `{"policy":{"rules":[{"id":"x","action":"deny","commands":["rm"],"examples":{"match":[{"cmd":"rm"}]}}]}}`, 2, `unknown key "cmd"`},
		{"sandbox default unknown", `{"sandbox":{"allow":"jail"}}`, 2, `sandbox.allow = "jail": must be none or a profile: inspect, root`},
		{"rule names an unknown sandbox", `{"policy":{"rules":[{"id":"r","action":"allow","commands":["ls"],"sandbox":"jail"}]}}`, 2, `policy.rules[0].sandbox = "jail": no such profile`},
		{"deny rule names a sandbox", `{"policy":{"rules":[{"id":"r","action":"deny","commands":["rm"],"sandbox":"inspect"}]}}`, 2, `policy.rules[0].sandbox = "inspect": a deny rule runs nothing`},
		{"custom profile shadows a built-in", `{"sandbox":{"profiles":{"root":{}}}}`, 2, `sandbox.profiles.root = "root": is built in`},
		{"custom profile bad capability", `{"sandbox":{"profiles":{"web":{"capabilities":["CAP_FLY"]}}}}`, 2, `sandbox.profiles.web.capabilities[0] = "CAP_FLY"`},
		{"custom profile writable without readOnly", `{"sandbox":{"profiles":{"web":{"writable":["/srv"]}}}}`, 2, `sandbox.profiles.web.writable = [/srv]: only means something with readOnly: true`},
		{"custom profile user this host lacks", `{"sandbox":{"allow":"web","profiles":{"web":{"user":"no-such-user-h36"}}}}`, 2, `sandbox.allow = "web": this host cannot enforce the profile: user "no-such-user-h36"`},
		{"none is an opt-out, warned", `{"sandbox":{"allow":"none","approved":"root"}}`, 0, `warning: sandbox.allow = "none": commands it chooses run without a sandbox`},
		{"default sandbox covers deny paths", `{"policy":{"rules":[{"id":"keys","action":"deny","paths":["/**/id_rsa"]}]}}`, 2, `policy.rules[0].paths[0] = "/**/id_rsa": the sandbox cannot cover`},
		{"deny path the sandbox cannot cover", `{"sandbox":{"allow":"root"},"policy":{"rules":[{"id":"keys","action":"deny","paths":["/**/id_rsa"]}]}}`, 2, `policy.rules[0].paths[0] = "/**/id_rsa": the sandbox cannot cover a pattern that starts with a wildcard`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"mcp-backend", "check-config", "--config", writeConfig(t, tc.body)}, nil, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, errb.String())
			}
			if !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Fatalf("output %q lacks %q", out.String()+errb.String(), tc.want)
			}
		})
	}
	t.Run("serve refuses an invalid config before opening a socket", func(t *testing.T) {
		port := proctest.FreePort(t)
		cfg := writeConfig(t, fmt.Sprintf(`{"listen":"127.0.0.1:%d","concurrency":{"maxQueue":-1}}`, port))
		var errb bytes.Buffer
		code := run(context.Background(), []string{"mcp-backend", "serve", "--config", cfg}, nil, &bytes.Buffer{}, &errb)
		if code != 2 || !strings.Contains(errb.String(), "concurrency.maxQueue = -1") {
			t.Fatalf("exit %d stderr %s", code, errb.String())
		}
	})
	t.Run("serve refuses non-loopback listen without a token", func(t *testing.T) {
		cfg := writeConfig(t, `{"listen":"0.0.0.0:0"}`)
		var errb bytes.Buffer
		code := run(context.Background(), []string{"mcp-backend", "serve", "--config", cfg}, nil, &bytes.Buffer{}, &errb)
		if code != 2 || !strings.Contains(errb.String(), "bearerTokenFile") {
			t.Fatalf("exit %d stderr %s", code, errb.String())
		}
	})
	// Configs check-config used to accept and serve could not run (a
	// duration overflow panicked serve; a TiB buffer is a fatal OOM at the
	// first file.read): both commands now refuse them with exit 2.
	for _, tc := range []struct{ name, body, want string }{
		{"queue wait overflowing a duration", `{"concurrency":{"queueWaitMs":9300000000000}}`, "concurrency.queueWaitMs = 9300000000000: must be 1..3600000"},
		{"output of a TiB", `{"limits":{"outputBytes":1099511627776,"responseBytes":1099511693312}}`, "limits.outputBytes = 1099511627776: must be 1..67108864"},
		{"output of max int64", `{"limits":{"outputBytes":9223372036854775807}}`, "limits.outputBytes = 9223372036854775807"},
		{"shell timeout overflowing a duration", `{"shell":{"maxTimeoutMs":9300000000000}}`, "shell.maxTimeoutMs = 9300000000000: must be 1..86400000"},
	} {
		for _, cmd := range []string{"check-config", "serve"} {
			t.Run(cmd+" refuses "+tc.name, func(t *testing.T) {
				addr := proctest.FreeAddr(t)
				body := strings.Replace(tc.body, "{", fmt.Sprintf(`{"listen":%q,`, addr), 1)
				var errb syncBuffer
				c := exec.Command(binary, cmd, "--config", writeConfig(t, body))
				c.Stderr = &errb
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan struct{})
				go func() { c.Wait(); close(exited) }()
				t.Cleanup(func() { c.Process.Kill(); <-exited })
				// A serve that accepted the config would answer /healthz:
				// stop it and fail rather than wait for it.
				proctest.Eventually(t, "exit or a listening server", func() bool {
					select {
					case <-exited:
						return true
					default:
					}
					if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
						resp.Body.Close()
						return true
					}
					return false
				})
				select {
				case <-exited:
				default:
					c.Process.Kill()
					<-exited
					t.Fatalf("%s started serving with an invalid config: %s", cmd, errb.String())
				}
				code := c.ProcessState.ExitCode()
				if code != 2 || !strings.Contains(errb.String(), tc.want) || strings.Contains(errb.String(), "panic") {
					t.Fatalf("exit %d, want 2 and %q; stderr %s", code, tc.want, errb.String())
				}
			})
		}
	}
	t.Run("check-config of /dev/zero fails at once", func(t *testing.T) {
		// Under a 2 GiB address-space limit, so an unbounded read fails
		// this test with an out-of-memory instead of taking the machine.
		c := exec.Command("/bin/sh", "-c", `ulimit -v 2097152 && exec "$0" "$@"`, binary, "check-config", "--config", "/dev/zero")
		var errb bytes.Buffer
		c.Stderr = &errb
		c.Run()
		code := c.ProcessState.ExitCode()
		if code != 2 || !strings.Contains(errb.String(), "/dev/zero") || !strings.Contains(errb.String(), "is a character device, want a regular file") {
			t.Fatalf("exit %d, stderr %.500s", code, errb.String())
		}
	})
	t.Run("missing --config is a usage error", func(t *testing.T) {
		code := run(context.Background(), []string{"mcp-backend", "check-config"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
		if code != 2 {
			t.Fatalf("exit %d", code)
		}
	})
}

// TestStdioSubprocess drives the real binary over stdio with the go-sdk
// client, including cancellation of a queued call by notifications/cancelled.
func TestStdioSubprocess(t *testing.T) {
	cfg := writeConfig(t, `{"concurrency":{"maxActive":4,"reservedControl":1,"maxShell":1,"maxQueue":4,"queueWaitMs":60000}}`)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(binary, "stdio", "--config", cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != len(mcpwire.ToolNames()) {
		t.Fatalf("tools: %v %v", err, tools)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{"command": "echo hi"}})
	if err != nil || res.IsError {
		t.Fatalf("shell.exec: %v %+v", err, res)
	}
	var out struct{ Stdout string }
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if out.Stdout != "hi\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
	// Occupy the one shell slot, queue a second call, cancel it.
	gate := filepath.Join(t.TempDir(), "go")
	first := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{
			"command": fmt.Sprintf("for i in $(seq 600); do [ -e %s ] && exit 0; sleep 0.05; done", gate)}})
		first <- err
	}()
	metrics := func() map[string]map[string]int {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "system.info", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Admission map[string]map[string]int `json:"admission"`
		}
		b, _ := json.Marshal(r.StructuredContent)
		json.Unmarshal(b, &info)
		return info.Admission
	}
	proctest.Eventually(t, "shell slot taken", func() bool { return metrics()["active"]["shell"] == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{"command": "echo late"}})
		second <- err
	}()
	proctest.Eventually(t, "second call queued", func() bool { return metrics()["queued"]["total"] == 1 })
	cancel()
	<-second
	proctest.Eventually(t, "queued call cancelled", func() bool { return metrics()["counters"]["cancelled"] == 1 })
	if m := metrics(); m["queued"]["total"] != 0 || m["active"]["shell"] != 1 {
		t.Fatalf("after cancel: %v", m)
	}
	os.WriteFile(gate, nil, 0o644)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMWhileSaturated: the real process, saturated with commands that
// spawn grandchildren, exits 0 within the stop budget and leaves no command
// process behind.
func TestSIGTERMWhileSaturated(t *testing.T) {
	port := proctest.FreePort(t)
	dir := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":"127.0.0.1:%d","concurrency":{"maxShell":8,"maxQueue":16}}`, port))
	cmd := exec.Command(binary, "serve", "--config", cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	proctest.Eventually(t, "healthz", func() bool {
		r, err := http.Get(base + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == 200
	})
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			pidFile := filepath.Join(dir, fmt.Sprintf("pids-%d", i))
			// A conversation per call (as real traffic): one alone would
			// leave the fair-share reserve free.
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": map[string]any{
				"name": "shell.exec", "arguments": map[string]any{"command": fmt.Sprintf("echo $$ >> %[1]s; sleep 300 & echo $! >> %[1]s; wait", pidFile)},
				"_meta": map[string]any{"openai/session": fmt.Sprintf("conversation-%d", i)}}})
			req, _ := http.NewRequest(http.MethodPost, base+"/mcp", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if r, err := http.DefaultClient.Do(req); err == nil {
				r.Body.Close()
			}
		}(i)
	}
	var pids []int
	proctest.Eventually(t, "8 commands with grandchildren running", func() bool {
		pids = pids[:0]
		files, _ := filepath.Glob(filepath.Join(dir, "pids-*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(b)) {
				p, _ := strconv.Atoi(s)
				pids = append(pids, p)
			}
		}
		return len(pids) == 16
	})
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5 s after SIGTERM (TimeoutStopSec=5)\n%s", stderr.String())
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	wg.Wait()
	for _, p := range pids {
		proctest.Eventually(t, fmt.Sprintf("pid %d gone", p), func() bool { return !proctest.Alive(p) })
	}
}

// notifySocket is a NOTIFY_SOCKET the test reads the process's sd_notify
// messages from, as systemd would.
func notifySocket(t testing.TB) (string, *net.UnixConn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sock, conn
}

// TestSystemdNotify: with NOTIFY_SOCKET set, the real process says READY=1
// once listening and feeds WATCHDOG=1 while its /healthz answers.
func TestSystemdNotify(t *testing.T) {
	sock, conn := notifySocket(t)
	port := proctest.FreePort(t)
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":"127.0.0.1:%d"}`, port))
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	got := map[string]bool{}
	buf := make([]byte, 512)
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for !(got["READY=1"] && got["WATCHDOG=1"]) {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("notifications so far %v: %v", got, err)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			got[line] = true
		}
		if got["WATCHDOG=1"] && !got["READY=1"] {
			t.Fatal("WATCHDOG=1 before READY=1")
		}
	}
	// READY=1 means listening: /healthz answers now.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after READY=1: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestStdioSIGTERMWhileRunning: stdio shuts down on SIGTERM even while a
// command runs, and takes the command with it.
func TestStdioSIGTERMWhileRunning(t *testing.T) {
	cfg := writeConfig(t, `{}`)
	cmd := exec.Command(binary, "stdio", "--config", cfg)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	pidFile := filepath.Join(t.TempDir(), "pids")
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "shell.exec", Arguments: map[string]any{
		"command": fmt.Sprintf("echo $$ >> %s; sleep 300", pidFile), "timeoutMs": 600000}})
	pids := proctest.ReadPids(t, pidFile, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() {
		for proctest.Alive(cmd.Process.Pid) {
			time.Sleep(10 * time.Millisecond)
		}
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("stdio still running 5 s after SIGTERM with a command in flight")
	}
	proctest.WaitDead(t, pids...)
}

// syncBuffer is a bytes.Buffer a child process and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
