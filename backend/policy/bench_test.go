package policy

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// hundredRules is a policy of 100 rules of every kind, the shape of a
// real allow list with asks and denials.
func hundredRules() Config {
	c := Default()
	c.Default = Ask
	for i := range 100 {
		r := Rule{ID: fmt.Sprintf("r%d", i), Action: []Action{Allow, Ask, Deny}[i%3]}
		switch i % 4 {
		case 0:
			r.Commands = []string{fmt.Sprintf("tool%d *", i), fmt.Sprintf("systemctl restart unit%d", i)}
		case 1:
			r.Paths = []string{fmt.Sprintf("/srv/app%d/**", i)}
		case 2:
			r.Units = []string{fmt.Sprintf("unit%d*.service", i)}
		case 3:
			r.Commands = []string{fmt.Sprintf("apt-get install pkg%d", i)}
			r.Principals = []Principal{{Kind: "oauth", ID: fmt.Sprintf("issuer user%d", i)}}
		}
		c.Rules = append(c.Rules, r)
	}
	c.Rules = append(c.Rules, Rule{ID: "inspect", Action: Allow, Commands: []string{"ls *", "grep *", "cat *"}})
	return c
}

// BenchmarkDecide: the policy's cost per call, against no policy (nil).
func BenchmarkDecide(b *testing.B) {
	shell, _ := json.Marshal(map[string]any{"command": "ls -la /srv | grep -v x && cat /etc/hostname"})
	file, _ := json.Marshal(map[string]any{"path": "/srv/app5/data.txt"})
	p, err := New(hundredRules())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		p    *Policy
		tool string
		args json.RawMessage
	}{
		{"no-policy/shell.exec", nil, mcpwire.ToolShellExec, shell},
		{"100-rules/shell.exec", p, mcpwire.ToolShellExec, shell},
		{"100-rules/file.read", p, mcpwire.ToolFileRead, file},
		{"100-rules/system.info", p, mcpwire.ToolSystemInfo, json.RawMessage(`{}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := Call{PrincipalKind: "oauth", PrincipalID: "issuer user7", Tool: bc.tool, Args: bc.args}
			b.ReportAllocs()
			for b.Loop() {
				if d := bc.p.Decide(c); d.Action == "" {
					b.Fatal("no decision")
				}
			}
		})
	}
}
