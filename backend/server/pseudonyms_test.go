package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// seenAs runs one call of subject in conversation on a fresh backend (a
// restart, when the state directory is kept) and returns how /metrics'
// flows.top and the call's start record name its caller.
func seenAs(t *testing.T, subject, conversation string) (mcpwire.FlowStat, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	bk := startBackend(t, func(c *config.Config) { c.Audit.Sink, c.Audit.File = config.AuditFile, path })
	g := newGate(t)
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call", "params": map[string]any{
		"name": "shell.exec", "arguments": map[string]any{"command": g.command()},
		"_meta": map[string]any{caller.MetaSubject: subject, caller.MetaSession: conversation}}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = post(context.Background(), bk.url+"/mcp", body)
	}()
	var top mcpwire.FlowStat
	proctest.Eventually(t, "the call running and in flows.top", func() bool {
		m := bk.metrics(t)
		if m.Flows == nil || len(m.Flows.Top) != 1 || m.Flows.Top[0].Active != 1 {
			return false
		}
		top = m.Flows.Top[0]
		return true
	})
	g.open(t)
	<-done
	if err := bk.srv.Audit().Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range auditRecords(t, path) {
		if r[audit.FieldMessageID] == audit.MsgCallStart {
			return top, r
		}
	}
	t.Fatal("no start record")
	return top, nil
}

// TestPseudonymsKeyedAndStable: /metrics, log lines and the audit trail
// name a caller by HMAC pseudonyms under the host's key in the state
// directory: not the unkeyed hash a dictionary of guessed subjects
// reverses, the same in /metrics and in the audit records (so one can be
// looked up in the other), the same after a restart, and what whoever
// holds the key computes.
func TestPseudonymsKeyedAndStable(t *testing.T) {
	const subject, conversation = "alice@example.com", "conversation-1"
	state := t.TempDir()
	t.Setenv("STATE_DIRECTORY", state)
	first, rec := seenAs(t, subject, conversation)
	again, _ := seenAs(t, subject, conversation) // another process, the same host

	keyFile := filepath.Join(state, caller.KeyFile)
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, %v; want mode 0600", keyFile, fi, err)
	}
	keys, err := caller.LoadKeys(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	want := keys.Resolve(caller.Claims{MetaSubject: subject, MetaSession: conversation})
	if first.PrincipalKind != "asserted" || first.Principal != want.PrincipalHash || first.Conversation != want.Conversation {
		t.Errorf("flows.top names %s:%s/%s; want asserted:%s/%s (the host key's pseudonyms)", first.PrincipalKind, first.Principal, first.Conversation, want.PrincipalHash, want.Conversation)
	}
	if again.Principal != first.Principal || again.Conversation != first.Conversation {
		t.Errorf("after a restart flows.top names %s/%s, before %s/%s", again.Principal, again.Conversation, first.Principal, first.Conversation)
	}
	if rec[audit.FieldPrincipalHash] != first.Principal || rec[audit.FieldConversation] != first.Conversation || rec[audit.FieldPrincipal] != subject {
		t.Errorf("start record names %q (%s)/%s; want %q with /metrics' %s/%s", rec[audit.FieldPrincipal], rec[audit.FieldPrincipalHash], rec[audit.FieldConversation], subject, first.Principal, first.Conversation)
	}
	for name, guess := range map[string]string{
		"principal":    "principal\x00asserted:" + subject,
		"conversation": caller.FromMetaSession + "\x00" + conversation,
	} {
		sum := sha256.Sum256([]byte(guess))
		if g := hex.EncodeToString(sum[:8]); g == first.Principal || g == first.Conversation {
			t.Errorf("the %s pseudonym is the unkeyed SHA-256 of a guessable value", name)
		}
	}

	// No state directory (process mode, the canary): a key of the process
	// only, so two processes name the same caller differently.
	t.Setenv("STATE_DIRECTORY", "")
	p1, _ := seenAs(t, subject, conversation)
	p2, _ := seenAs(t, subject, conversation)
	if p1.Principal == p2.Principal || p1.Principal == first.Principal {
		t.Errorf("without a state directory two processes gave %s and %s (the host's: %s); want a key per process", p1.Principal, p2.Principal, first.Principal)
	}
}

// TestUnknownToolOverStdio: stdio has no intake; the middleware refuses an
// unknown tool before admission, and the answer quotes the name bounded.
func TestUnknownToolOverStdio(t *testing.T) {
	bk := startBackend(t, nil)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bk.srv.ServeStdio(ctx, bk.srv.StdioTransport(inR, outW)) }()
	t.Cleanup(func() { cancel(); inW.Close(); outR.Close(); <-done })
	lines := bufio.NewReader(outR)
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + strings.Repeat("n", 1<<20) + `","arguments":{}}}`)
	line, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r toolReply
	if len(line) > 1024 || json.Unmarshal([]byte(line), &r) != nil || r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "(1048576 bytes)") {
		t.Fatalf("answer of %d bytes: %.300s; want the invalid-params error within 1 KiB, the name bounded", len(line), line)
	}
	if m := bk.metrics(t); m.Counters.Accepted != 0 {
		t.Fatalf("admission accepted %d calls; an unknown tool must not reach it", m.Counters.Accepted)
	}
}
