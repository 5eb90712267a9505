package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestIPNetnsExecInSystemd: `ip netns exec` and its spellings run the
// command they are given, so a deny rule on that command must see through
// them. Inside the disposable container only (they make namespaces):
// through the real backend, with a policy denying touch each is refused
// and no marker appears; without the policy (the negative control) each
// creates its marker, so the attempts are real.
func TestIPNetnsExecInSystemd(t *testing.T) {
	nspawntest.Require(t)
	s := newSite(t, 60*time.Second)
	s.inContainer("ip", "netns", "add", "mcp-t")
	attempts := []struct{ name, cmd string }{
		{"netns exec", "ip netns exec mcp-t touch @M@"},
		{"-n netns exec", "ip -n mcp-t netns exec mcp-t touch @M@"},
		{"-netns, abbreviated", "ip -netns mcp-t net e mcp-t touch @M@"},
		{"-all netns exec", "ip -all netns exec touch @M@"},
		{"behind nice", "nice -n 5 ip -all netns exec touch @M@"},
		{"behind timeout", "timeout 20 ip -4 -o netns exec mcp-t /usr/bin/touch @M@"},
		{"in a list", "true && ip netns exec mcp-t sh -c 'touch @M@'"},
	}
	run := func(t *testing.T, dir string, wantRefused bool) {
		for _, a := range attempts {
			marker := filepath.Join(dir, strings.NewReplacer(" ", "-", ",", "").Replace(a.name))
			cmd := strings.ReplaceAll(a.cmd, "@M@", marker)
			te := toolCall(t, s.Backend, "alice", mcpwire.ToolShellExec, map[string]any{"command": cmd}, nil)
			_, err := os.Stat(marker)
			switch {
			case wantRefused && (te == nil || te.Code != mcpwire.CodePermissionDenied || !strings.Contains(te.Message, "rule no-touch")):
				t.Errorf("%s (%s): %+v, want PERMISSION_DENIED by rule no-touch", a.name, cmd, te)
			case wantRefused && err == nil:
				t.Errorf("%s: the denied command ran: %s exists", a.name, marker)
			case !wantRefused && (te != nil || err != nil):
				t.Errorf("%s (%s): without the policy: %+v, marker %v; the attempt must really run", a.name, cmd, te, err)
			}
		}
	}
	denied, open := filepath.Join(s.Dir, "denied"), filepath.Join(s.Dir, "open")
	for _, d := range []string{denied, open} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "policy": map[string]any{
		"default": "allow", "opaque": "deny",
		"rules": []map[string]any{{"id": "no-touch", "action": "deny", "commands": []string{"touch"},
			"examples": map[string]any{"match": []map[string]any{{"command": "ip -all netns exec touch /x"}}}}},
	}})
	s.restartBackend()
	t.Run("policy", func(t *testing.T) { s.T = t; run(t, denied, true) })

	// The negative control runs them with no sandbox: every profile
	// refuses setns and mount, so under the default (root) ip netns exec
	// fails whatever the policy says.
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "sandbox": map[string]any{"allow": "none"}})
	s.T = t
	s.restartBackend()
	t.Run("without policy", func(t *testing.T) { s.T = t; run(t, open, false) })
}
