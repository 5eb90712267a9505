package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestApprovalsWatch: the built mcpctl follows a real server's store with
// --json: a ChatGPT-shaped call's pending approval, then its approval (by
// mcpctl approve), then its run (the same call sent again starts a job),
// one JSON object a line, in that order; SIGTERM ends it with exit 0.
func TestApprovalsWatch(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "approvals")
	b := startHTTP(t, `{"jobs":{"mode":"process"},"policy":{"approvals":{"dir":"`+store+`"},
		"rules":[{"id":"ask-touch","action":"ask","reason":"new files need a yes","commands":["touch *"]}]}}`)
	watch := exec.Command(mcpctl(t), "approvals", "watch", "--json", "--interval", "50ms", "--dir", store)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill() }()
	type event struct {
		Event string `json:"event"`
		ID    string `json:"id"`
		JobID string `json:"jobId"`
	}
	events := make(chan event, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("watch --json printed a line that is no JSON object: %q", sc.Text())
				continue
			}
			events <- ev
		}
		close(events)
	}()
	next := func(want, id string) event {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok || ev.Event != want || (id != "" && ev.ID != id) {
				t.Fatalf("watch: got %+v (open %v), want %s of %s", ev, ok, want, id)
			}
			return ev
		case <-time.After(2 * time.Minute): // a hang, not a timing
			t.Fatalf("watch printed no %s event", want)
		}
		return event{}
	}

	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "chatgpt-shaped", Version: "1.0.0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() envelope {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": "touch " + filepath.Join(dir, "m")},
			Meta: mcp.Meta{mcpwire.MetaSubject: "alice"}})
		if err != nil {
			t.Fatal(err)
		}
		return envelopeOf(res)
	}
	env := call()
	if env.Code != string(mcpwire.CodeNeedsApproval) || env.ApprovalID == "" {
		t.Fatalf("first call: %+v", env)
	}
	id := env.ApprovalID
	next("pending", id)
	if code, out := runCtl(t, "approvals", "approve", id, "--dir", store); code != 0 {
		t.Fatalf("approve: exit %d: %s", code, out)
	}
	next("approved", id)
	if env := call(); env.ApprovalStatus != mcpwire.ApprovalApproved {
		t.Fatalf("the approved call sent again: %+v", env)
	}
	next("ran", id)
	if err := watch.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range events {
	}
	if err := watch.Wait(); err != nil {
		t.Fatalf("watch after SIGTERM: %v, want exit 0", err)
	}
}
