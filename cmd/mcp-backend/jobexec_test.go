package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJobExecHidesTheStateDirectory: the real binary's job-exec (a job
// unit's main process, here without systemd) runs the job's shell where
// the jobs' state directory is an empty read-only directory: the job
// finds nothing there and cannot plant a record; the record is the
// supervisor's, and the cover never reaches this namespace.
func TestJobExecHidesTheStateDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting in a namespace of its own takes root (the backend runs as root)")
	}
	state := t.TempDir()
	const id = "j0123456789abcdef"
	dir := filepath.Join(state, "v1", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := `if echo '{"version":1,"state":"exited","exitCode":0}' > ` + dir + `/exit.json; then echo planted; else echo refused; fi; ` +
		`echo "entries $(ls -A ` + state + ` | wc -l)"; exit 3`
	spec, _ := json.Marshal(map[string]any{"version": 1, "id": id, "owner": "asserted:mallory", "conversation": "c",
		"command": cmd, "shell": "/bin/sh", "timeoutMs": 60000, "outputBytes": 10000, "mode": "systemd", "created": time.Now().UTC()})
	for name, b := range map[string][]byte{"spec.json": spec, "env": []byte("PATH=/usr/bin:/bin")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(binary, "job-exec", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("job-exec: %v: %s", err, out)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "stdout"))
	if !strings.Contains(string(out), "refused") || !strings.Contains(string(out), "entries 0") {
		t.Fatalf("the job's shell saw or wrote the state directory: %q", out)
	}
	var rec struct {
		State    string
		ExitCode *int
	}
	b, err := os.ReadFile(filepath.Join(dir, "exit.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.State != "exited" || rec.ExitCode == nil || *rec.ExitCode != 3 {
		t.Fatalf("record %s (%v), want the supervisor's exited 3", b, err)
	}
	if ents, err := os.ReadDir(state); err != nil || len(ents) != 1 {
		t.Fatalf("this namespace sees %v (%v) in the state directory", ents, err)
	}
}
