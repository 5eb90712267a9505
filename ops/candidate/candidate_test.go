package candidate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// buildBackend builds the real mcp-backend stamped with version.
func buildBackend(t testing.TB, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mcp-backend")
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/overdeck/mcp-backend/internal/buildinfo.Version="+version, "-o", out, "../../cmd/mcp-backend")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func writeFile(t testing.TB, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	real := buildBackend(t, "v7.0.1")
	good := writeFile(t, dir, "good.json", `{"listen":"127.0.0.1:3211"}`, 0o644)
	bad := writeFile(t, dir, "bad.json", `{"concurrency":{"maxActive":0}}`, 0o644)
	tests := []struct {
		name   string
		path   string
		config string
		check  string // failing check, "" for success
		errHas string
	}{
		{"real build", real, good, "", ""},
		{"real build without config", real, "", "", ""},
		{"missing", filepath.Join(dir, "nope"), "", "file", "does not exist"},
		{"directory", dir, "", "file", "not a regular file"},
		{"not executable", writeFile(t, dir, "plain", "#!/bin/sh\n", 0o644), "", "executable", "not executable"},
		{"version fails", writeFile(t, dir, "vfail", "#!/bin/sh\necho broken >&2\nexit 3\n", 0o755), "", "--version", "broken"},
		{"version wrong program", writeFile(t, dir, "other", "#!/bin/sh\necho something 1.0\n", 0o755), "", "--version", "want \"mcp-backend VERSION\""},
		{"version hangs", writeFile(t, dir, "hang", "#!/bin/sh\nexec sleep 30\n", 0o755), "", "--version", "no answer within"},
		{"version floods", writeFile(t, dir, "flood", "#!/bin/sh\necho mcp-backend v1\nhead -c 67108864 /dev/zero\n", 0o755), "", "--version", "printed more than 65536 bytes"},
		{"config refused by real build", real, bad, "check-config", "maxActive"},
		{"check-config fails", writeFile(t, dir, "ccfail", "#!/bin/sh\n[ \"$1\" = --version ] && { echo mcp-backend v1; exit 0; }\necho 'listen: bad' >&2\nexit 2\n", 0o755), good, "check-config", "exit status 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Only the hanging build is meant to meet the timeout; the real
			// build gets a minute: a loaded machine may take seconds to start it.
			timeout := time.Minute
			if tc.errHas == "no answer within" {
				timeout = 2 * time.Second
			}
			res, err := Check(context.Background(), tc.path, Options{Config: tc.config, Timeout: timeout})
			if tc.check == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if res.Version != "v7.0.1" || !strings.HasPrefix(res.Digest, "sha256:") || len(res.Digest) != 71 {
					t.Fatalf("result %+v: want version v7.0.1 and a sha256 digest", res)
				}
				if res.ConfigChecked != tc.config {
					t.Errorf("ConfigChecked = %q, want %q", res.ConfigChecked, tc.config)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ce.Check != tc.check {
				t.Errorf("failed check %q, want %q (%v)", ce.Check, tc.check, err)
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q should name the path and contain %q", err, tc.errHas)
			}
		})
	}
}

// TestCheckBoundsOutput: a candidate printing 64 MiB for --version costs the
// check a bounded amount of memory, not the output's size (600 MB once
// cost a 2 GB heap).
func TestCheckBoundsOutput(t *testing.T) {
	flood := writeFile(t, t.TempDir(), "flood", "#!/bin/sh\necho mcp-backend v1\nhead -c 67108864 /dev/zero\n", 0o755)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Check(context.Background(), flood, Options{Timeout: time.Minute})
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d bytes for a 64 MiB --version", alloc)
	if err == nil {
		t.Error("a 64 MiB --version passed the check")
	}
	if alloc > 8<<20 {
		t.Fatalf("the check allocated %d bytes for a 64 MiB --version, want it bounded (< 8 MiB)", alloc)
	}
}

// TestCheckKillsCandidateGroup: whether the candidate hangs or answers, no
// process it started outlives the check.
func TestCheckKillsCandidateGroup(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, script, check string
	}{
		{"hanging candidate with a child", "sleep 300 & echo $! > %s\nexec sleep 300\n", "--version"},
		{"child holding no pipe", "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > %s\nexec sleep 300 </dev/null >/dev/null 2>&1\n", "--version"},
		{"answering candidate leaving a child", "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > %s\necho mcp-backend v1\n", ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(dir, fmt.Sprintf("pid%d", i))
			bin := writeFile(t, dir, fmt.Sprintf("cand%d", i), "#!/bin/sh\n"+fmt.Sprintf(tc.script, pidFile), 0o755)
			_, err := Check(context.Background(), bin, Options{Timeout: 2 * time.Second})
			var ce *Error
			if tc.check == "" && err != nil || tc.check != "" && (!errors.As(err, &ce) || ce.Check != tc.check) {
				t.Fatalf("err = %v, want failed check %q", err, tc.check)
			}
			child := proctest.ReadPids(t, pidFile, 1)
			t.Cleanup(func() { syscall.Kill(child[0], syscall.SIGKILL) })
			proctest.WaitDead(t, child...)
		})
	}
}
