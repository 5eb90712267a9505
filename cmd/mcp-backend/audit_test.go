package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
)

// TestStdioAuditFile: the real binary over stdio, outside systemd, writes
// its audit records to audit.file: the process's start (version, digests),
// a call's start and end (transport stdio, file.write as size and sha256,
// never the content), and the process's stop when stdin closes.
func TestStdioAuditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	cmd, in, out := startStdio(t, writeConfig(t, fmt.Sprintf(`{"audit":{"sink":"file","file":%q}}`, path)))
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 16<<20)
	await := func(id string) {
		t.Helper()
		for lines.Scan() {
			var r struct{ ID json.RawMessage }
			if json.Unmarshal(lines.Bytes(), &r) == nil && string(r.ID) == id {
				return
			}
		}
		t.Fatalf("no answer with id %s", id)
	}
	const body = "stdio-body-never-in-the-audit"
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	await("1")
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintf(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"file.write","arguments":{"path":%q,"content":%q}}}`+"\n", filepath.Join(dir, "out"), body)
	await("2")
	in.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("stdio did not end when stdin closed")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(body)) {
		t.Fatal("the audit file holds file.write's content")
	}
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]string
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		events = append(events, m[audit.FieldEvent])
		switch m[audit.FieldEvent] {
		case audit.EventProcessStart:
			if !strings.HasPrefix(m[audit.FieldDigest], "sha256:") || !strings.HasPrefix(m[audit.FieldConfigDigest], "sha256:") || m[audit.FieldTransport] != "stdio" {
				t.Errorf("process start without digests or transport: %v", m)
			}
		case audit.EventCallStart:
			if m[audit.FieldTool] != "file.write" || m[audit.FieldTransport] != "stdio" || m[audit.FieldContentBytes] != fmt.Sprint(len(body)) {
				t.Errorf("call start: %v", m)
			}
		case audit.EventCallEnd:
			if m[audit.FieldOutcome] != "ok" {
				t.Errorf("call end: %v", m)
			}
		}
	}
	want := []string{audit.EventProcessStart, audit.EventCallStart, audit.EventCallEnd, audit.EventProcessStop}
	if strings.Join(events, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", events, want)
	}
}
