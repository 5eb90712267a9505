package jobs

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProcessAlive: a process-mode job's supervising process is named so
// that another process tells whether it still runs, a reused pid
// included.
func TestProcessAlive(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	running := processID(child.Process.Pid)
	ended := exec.Command("sleep", "60")
	if err := ended.Start(); err != nil {
		t.Fatal(err)
	}
	gone := processID(ended.Process.Pid)
	_ = ended.Process.Kill()
	_ = ended.Wait()
	if gone == "" {
		t.Fatal("no id for a running child")
	}
	self := selfProcess()
	// The same pid started at another time is another process.
	parts := strings.Split(self, "/")
	reused := parts[0] + "/" + parts[1] + "/1"
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{"this process", self, true},
		{"a running child", running, true},
		{"a child that ended", gone, false},
		{"the pid with another start time", reused, false},
		{"empty", "", false},
		{"malformed", "x/y", false},
		{"pid zero", parts[0] + "/0/1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := processAlive(tc.id); got != tc.want {
				t.Fatalf("processAlive(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}
