package server

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/sandbox"
)

// BenchmarkShellExecSandbox is shell.exec of `true` through the real
// handler, one call at a time, with no sandbox and under inspect and root
// (process mode: the sandbox-exec helper of a built mcp-backend), with the
// p50 and p99 of a call reported.
//
//	go test -run '^$' -bench ShellExecSandbox -benchtime 200x ./backend/server/
func BenchmarkShellExecSandbox(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the sandbox needs root")
	}
	bin := filepath.Join(b.TempDir(), "mcp-backend")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/mcp-backend").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	old := sandboxExe
	sandboxExe = func() (string, error) { return bin, nil }
	b.Cleanup(func() { sandboxExe = old })
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"true","cwd":"/"}}}`)
	for _, profile := range []string{sandbox.None, sandbox.Inspect, sandbox.Root} {
		b.Run(profile, func(b *testing.B) {
			bk := startBackend(b, func(c *config.Config) { c.Sandbox.Allow = profile })
			client := bk.http.Client()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, bk.url+"/mcp", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.Contains(out, []byte(`"exitCode":0`)) {
					b.Fatalf("status %d: %s", resp.StatusCode, out)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
