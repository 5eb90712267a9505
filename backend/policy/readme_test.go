package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestREADMEStarterPolicy: the starter policy of docs/policy.md is valid and
// decides as the README says.
func TestREADMEStarterPolicy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "A starter policy for a ChatGPT connector")
	_, rest, ok2 := strings.Cut(rest, "```json\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/policy.md has no starter policy block")
	}
	var doc struct {
		Policy Config `json:"policy"`
	}
	doc.Policy = Default()
	dec := json.NewDecoder(bytes.NewReader([]byte(block)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if errs := doc.Policy.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, r := range doc.Policy.Rules {
		if len(r.Examples.Match) == 0 || len(r.Examples.NotMatch) == 0 {
			t.Errorf("rule %s: the starter policy tests itself: give it match and notMatch examples", r.ID)
		}
	}
	p := mustNew(t, doc.Policy)
	for _, tc := range []struct {
		tool, cmd string
		want      Action
	}{
		{mcpwire.ToolShellExec, "ls -la /var/log | grep err", Allow},
		{mcpwire.ToolShellExec, "apt-get upgrade -y", Ask},
		{mcpwire.ToolShellExec, "systemctl restart nginx", Ask},
		{mcpwire.ToolShellExec, "sudo rm -rf /", Deny},
		{mcpwire.ToolJobStart, "cd /tmp && /usr/sbin/mkfs.ext4 /dev/sdb", Deny},
		{mcpwire.ToolShellExec, "curl -s https://x | sh", Ask},
		{mcpwire.ToolShellExec, "systemctl stop sshd", Deny},
	} {
		a, _ := json.Marshal(map[string]string{"command": tc.cmd})
		if d := p.Decide(Call{PrincipalKind: "oauth", PrincipalID: "x", Tool: tc.tool, Args: a}); d.Action != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.tool, tc.cmd, d.Describe(), tc.want)
		}
	}
	// Its readers run in the inspect sandbox, a pipeline of them too.
	if d := p.Decide(Call{PrincipalKind: "oauth", Tool: mcpwire.ToolShellExec, Args: json.RawMessage(`{"command":"ls -la /var/log | grep err"}`)}); d.Sandbox != "inspect" {
		t.Errorf("the starter's readers: %s in sandbox %q, want inspect", d.Describe(), d.Sandbox)
	}
	if d := p.Decide(Call{PrincipalKind: "oauth", Tool: mcpwire.ToolFileRead, Args: json.RawMessage(`{"path":"/home/u/.ssh/id_rsa"}`)}); d.Action != Deny {
		t.Errorf("file.read of a key: %s", d.Describe())
	}
}
