package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// servesJobs tells a build with the job supervisor from one without:
// the cutover warns before it runs jobs' next reader on an older build.
func TestServesJobs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, script string
		want         bool
	}{
		{"with job-exec", "#!/bin/sh\n[ \"$1\" = job-exec ] && exit 0\nexit 3\n", true},
		{"before jobs", "#!/bin/sh\necho 'No help topic for job-exec' >&2\nexit 3\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.script), 0o755); err != nil {
				t.Fatal(err)
			}
			if got := servesJobs(context.Background(), p); got != tc.want {
				t.Fatalf("servesJobs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompareJobs(t *testing.T) {
	before := []JobUnit{{Unit: "mcp-job-a.service", InvocationID: "1"}, {Unit: "mcp-job-b.service", InvocationID: "2"}, {Unit: "mcp-job-c.service", InvocationID: "3"}}
	after := []JobUnit{{Unit: "mcp-job-a.service", InvocationID: "1"}, {Unit: "mcp-job-b.service", InvocationID: "9"}, {Unit: "mcp-job-d.service", InvocationID: "4"}}
	r := CompareJobs(before, after)
	// b restarted (another invocation) counts as not kept; c ended; d is new.
	if r.RunningBefore != 3 || r.StillRunning != 1 || len(r.Ended) != 2 || r.Ended[0] != "mcp-job-b.service" || r.Ended[1] != "mcp-job-c.service" {
		t.Fatalf("CompareJobs = %+v", r)
	}
}
