package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestApprovalsNotify: mcpctl approvals notify (what the notifier's
// service runs) over a real server's store, with the operator's command
// appending what it reads to a file. Each pending approval reaches it
// once, whatever the number of runs; a command that exits 1 or outlives
// its timeout is tried 1+retries times in all and then given up, logged
// (exit 1); a run with nothing new does nothing.
func TestApprovalsNotify(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "approvals")
	b := startHTTP(t, `{"policy":{"approvals":{"dir":"`+store+`"},
		"rules":[{"id":"ask-touch","action":"ask","reason":"new files need a yes","commands":["touch *"]}]}}`)
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "chatgpt-shaped", Version: "1.0.0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ask := func(t *testing.T, command string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpwire.ToolShellExec, Arguments: map[string]any{"command": command},
			Meta: mcp.Meta{mcpwire.MetaSubject: "alice", "openai/session": command}})
		if err != nil {
			t.Fatal(err)
		}
		env := envelopeOf(res)
		if env.Code != string(mcpwire.CodeNeedsApproval) || env.ApprovalID == "" {
			t.Fatalf("%q: %+v", command, env)
		}
		return env.ApprovalID
	}
	for _, tc := range []struct {
		name, script, timeout string
		retries               int
		runs                  int // notify runs
		code                  int // of each run
		attempts              int // of each approval, in all
		delivered             bool
	}{
		{"appends once", `cat >> "$OUT"; echo >> "$OUT"`, "10s", 2, 3, 0, 1, true},
		{"exits 1", `cat > /dev/null; echo x >> "$OUT.attempts"; exit 1`, "10s", 2, 2, 1, 3, false},
		{"outlives its timeout", `echo x >> "$OUT.attempts"; exec sleep 60`, "1s", 1, 2, 1, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			out := filepath.Join(sub, "out")
			// Its own store: what other cases asked is not this case's.
			st := filepath.Join(sub, "state")
			ids := []string{ask(t, "touch "+filepath.Join(sub, "a")), ask(t, "touch "+filepath.Join(sub, "b"))}
			cfg, _ := json.Marshal(map[string]any{"stateDir": st, "approvals": map[string]any{"dir": store, "notify": map[string]any{
				"command": "/bin/sh", "args": []string{"-c", strings.ReplaceAll(tc.script, "$OUT", out)}, "timeout": tc.timeout, "retries": tc.retries}}})
			cfgFile := filepath.Join(sub, "mcpctl.json")
			if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < tc.runs; i++ {
				code, text := runCtl(t, "--config", cfgFile, "approvals", "notify")
				want := tc.code
				if i > 0 && !tc.delivered {
					want = 0 // given up: nothing left to try
				}
				if code != want {
					t.Fatalf("run %d: exit %d, want %d: %s", i, code, want, text)
				}
				t.Logf("run %d: %s", i, strings.TrimSpace(text))
			}
			got, _ := os.ReadFile(out)
			for _, id := range ids {
				n := strings.Count(string(got), `"id":"`+id+`"`)
				if tc.delivered && (n != 1 || !strings.Contains(string(got), "mcpctl approvals approve "+id)) {
					t.Fatalf("approval %s delivered %d times, want once with its approve line:\n%s", id, n, got)
				}
			}
			if !tc.delivered {
				att, _ := os.ReadFile(out + ".attempts")
				// Each case's command sees every approval pending then,
				// the earlier cases' too: count this case's two.
				if n := strings.Count(string(att), "x"); n < tc.attempts*len(ids) {
					t.Fatalf("%d attempts in all, want at least %d (%d each)", n, tc.attempts*len(ids), tc.attempts)
				}
				marks, _ := os.ReadDir(filepath.Join(st, "approvals-notified"))
				for _, id := range ids {
					b, err := os.ReadFile(filepath.Join(st, "approvals-notified", id))
					var m struct {
						Attempts int
						OK       bool
					}
					if err != nil || json.Unmarshal(b, &m) != nil || m.OK || m.Attempts != tc.attempts {
						t.Fatalf("marker of %s: %s %v (all: %v), want given up after %d attempts", id, b, err, marks, tc.attempts)
					}
				}
			}
		})
	}
	_ = fmt.Sprint
}
