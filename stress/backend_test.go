package stress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/overdeck/mcp-backend/stress"
)

// backendBinary builds ./cmd/mcp-backend once per test binary.
func backendBinary(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	pkg := filepath.Join(root, "cmd", "mcp-backend")
	if m, _ := filepath.Glob(filepath.Join(pkg, "*.go")); len(m) == 0 {
		t.Skip("./cmd/mcp-backend does not exist yet: nothing to stress")
	}
	bin := filepath.Join(t.TempDir(), "mcp-backend")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/mcp-backend")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build mcp-backend: %v\n%s", err, b)
	}
	return bin
}

// startBackend runs the real backend with small limits on a free loopback
// port and returns its base URL and process.
func startBackend(t testing.TB, bin string) (string, *os.Process) {
	t.Helper()
	addr := proctest.FreeAddr(t)
	cfg := map[string]any{
		"listen":      addr,
		"concurrency": map[string]any{"maxActive": 12, "reservedControl": 2, "maxShell": 4, "maxQueue": 8, "queueWaitMs": 2000},
	}
	b, _ := json.Marshal(cfg)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	logf, err := os.Create(filepath.Join(t.TempDir(), "backend.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start backend: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("backend log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, cmd.Process
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("backend exited before answering /healthz:\n%s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend not healthy at %s after 10s: %v", base, err)
		}
	}
}

// TestRealBackend stresses the real mcp-backend (a subprocess) at small
// scale, with every fault: the verdict must be PASS.
func TestRealBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and stresses the real backend")
	}
	bin := backendBinary(t)
	base, proc := startBackend(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := stress.Run(ctx, stress.Config{
		Target:     base,
		Profile:    stress.Overload,
		Duration:   3 * time.Second,
		Rate:       100,
		ShellSleep: 300 * time.Millisecond,
		Thresholds: forALoadedMachine(),
		Faults:     true,
		Unit:       &stress.ProcSampler{PID: proc.Pid},
		UnitName:   fmt.Sprintf("pid %d", proc.Pid),
	})
	if err != nil {
		t.Fatalf("stress.Run: %v", err)
	}
	if !rep.Pass || testing.Verbose() {
		logChecks(t, rep)
	}
	if !rep.Pass {
		t.Fatal("verdict FAIL against the real backend")
	}
	st := statusOf(rep)
	for _, n := range []string{"shell.reaches.limit", "unit.stable", "fault.disconnect.queued", "fault.grandchildren"} {
		if st[n] != stress.Pass {
			t.Errorf("check %s = %s, want PASS", n, st[n])
		}
	}
}
