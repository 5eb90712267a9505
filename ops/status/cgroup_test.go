package status

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemoryWarning(t *testing.T) {
	tests := []struct {
		name     string
		content  *string // nil: no file
		contains string  // "" for no warning
	}{
		{"v2 with memory", ptr("cpuset cpu io memory hugetlb pids rdma misc\n"), ""},
		{"v2 without memory", ptr("cpuset cpu io pids\n"), "offers no memory controller"},
		{"memory as part of a name only", ptr("memory_recursiveprot\n"), "offers no memory controller"},
		{"no v2 hierarchy (v1 or hybrid)", nil, "no cgroup v2 hierarchy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "cgroup.controllers")
			if tc.content != nil {
				if err := os.WriteFile(p, []byte(*tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := MemoryWarning(p)
			if (tc.contains == "") != (got == "") || !strings.Contains(got, tc.contains) {
				t.Fatalf("warning %q, want one containing %q", got, tc.contains)
			}
			if got != "" && !strings.Contains(got, "MemoryHigh/MemoryMax are not applied") || got != "" && !strings.Contains(got, "memory guard is off") {
				t.Fatalf("warning %q does not say what is not enforced", got)
			}
		})
	}
}

func ptr(s string) *string { return &s }
