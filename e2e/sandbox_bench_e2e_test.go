package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// BenchmarkShellExecSandboxInSystemd is backend/server's
// BenchmarkShellExecSandbox under a real systemd: the production unit of a
// site in a container serves shell.exec of `true` through real HTTP, one
// call at a time, with no sandbox and under inspect and root (the
// sandbox-exec helper, as in process mode: no transient unit per call),
// with the p50 and p99 of a call reported.
//
//	go test -run '^$' -bench ShellExecSandboxInSystemd -benchtime 300x ./e2e/
func BenchmarkShellExecSandboxInSystemd(b *testing.B) {
	if testing.Short() {
		b.Skip("boots a container")
	}
	s := newSite(b, time.Hour)
	for _, profile := range []string{"none", "inspect", "root"} {
		configured := false
		b.Run(profile, func(b *testing.B) {
			parent := s.T
			s.T = b
			defer func() { s.T = parent }()
			if !configured {
				s.sandboxConfig(profile)
				configured = true
			}
			args := map[string]any{"command": "true", "cwd": "/"}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				var r mcpwire.ShellResult
				s.job("bench", mcpwire.ToolShellExec, args, &r)
				lat = append(lat, time.Since(start))
				if shellExit(r) != 0 {
					b.Fatalf("true under %s: exit %d: %s", profile, shellExit(r), r.Stderr)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
