package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

func mustNew(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cfgOf(def Action, rules ...Rule) Config {
	c := Default()
	c.Default = def
	c.Rules = rules
	return c
}

func args(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestValidateNamesFieldAndRejectsNeverMatching(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"default is valid", Default(), ""},
		{"bad default", Config{Default: "maybe", Opaque: Ask, Approvals: Default().Approvals}, `policy.default = "maybe": must be allow, ask or deny`},
		{"opaque allow refused", Config{Default: Allow, Opaque: Allow, Approvals: Default().Approvals}, `policy.opaque = "allow"`},
		{"missing id", cfgOf(Allow, Rule{Action: Deny, Commands: []string{"rm"}}), `policy.rules[0].id = ""`},
		{"duplicate id", cfgOf(Allow, Rule{ID: "a", Action: Deny}, Rule{ID: "a", Action: Deny}), `policy.rules[1].id = "a": must be unique`},
		{"bad action", cfgOf(Allow, Rule{ID: "a", Action: "block"}), `policy.rules[0].action = "block"`},
		{"unknown tool", cfgOf(Allow, Rule{ID: "a", Action: Deny, Tools: []string{"shell.run"}}), `policy.rules[0].tools[0] = "shell.run": can never match`},
		{"commands on file tools", cfgOf(Allow, Rule{ID: "a", Action: Deny, Tools: []string{"file.read"}, Commands: []string{"rm"}}), `policy.rules[0].tools[0] = "file.read": can never match`},
		{"glob command name", cfgOf(Allow, Rule{ID: "a", Action: Deny, Commands: []string{"r* -rf"}}), `policy.rules[0].commands[0] = "r* -rf"`},
		{"bad path", cfgOf(Allow, Rule{ID: "a", Action: Deny, Paths: []string{"etc/shadow"}}), `policy.rules[0].paths[0] = "etc/shadow": must be an absolute path pattern`},
		{"bad signal", cfgOf(Allow, Rule{ID: "a", Action: Deny, Signals: []string{"SIGFOO"}}), `policy.rules[0].signals[0] = "SIGFOO"`},
		{"bad pids", cfgOf(Allow, Rule{ID: "a", Action: Deny, PIDs: []string{"9-3"}}), `policy.rules[0].pids[0] = "9-3"`},
		{"scopes on operator", cfgOf(Allow, Rule{ID: "a", Action: Deny, Principals: []Principal{{Kind: "operator", Scopes: []string{"mcp:exec"}}}}), `policy.rules[0].principals[0].scopes`},
		{"bad kind", cfgOf(Allow, Rule{ID: "a", Action: Deny, Principals: []Principal{{Kind: "root"}}}), `policy.rules[0].principals[0].kind = "root"`},
		{"bad approver", cfgOf(Allow, Rule{ID: "a", Action: Ask, Approver: "admin", Commands: []string{"rm"}}), `policy.rules[0].approver = "admin": must be user`},
		{"approver on deny", cfgOf(Allow, Rule{ID: "a", Action: Deny, Approver: "operator", Commands: []string{"rm"}}), `policy.rules[0].approver = "operator": only an ask rule has an approver`},
		{"approver operator ok", cfgOf(Allow, Rule{ID: "a", Action: Ask, Approver: "operator", Commands: []string{"rm"}}), ""},
		{"service glob ok", cfgOf(Ask, Rule{ID: "a", Action: Allow, Tools: []string{"service.*"}, Units: []string{"nginx.service"}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.cfg.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			all := strings.Join(got, "\n")
			if tc.want == "" && len(errs) > 0 {
				t.Fatalf("want valid, got %s", all)
			}
			if tc.want != "" && !strings.Contains(all, tc.want) {
				t.Fatalf("want an error containing %q, got %q", tc.want, all)
			}
		})
	}
}

// TestDecideApprover: an ask is the operator's alone when any part that
// asks comes from a rule whose approver is the operator.
func TestDecideApprover(t *testing.T) {
	p := mustNew(t, cfgOf(Allow,
		Rule{ID: "upgrades", Action: Ask, Approver: ApproverOperator, Commands: []string{"apt-get *"}},
		Rule{ID: "restart", Action: Ask, Approver: ApproverUser, Commands: []string{"systemctl restart *"}},
		Rule{ID: "touch", Action: Ask, Commands: []string{"touch *"}},
		Rule{ID: "writes", Action: Ask, Approver: ApproverOperator, Tools: []string{"file.write"}},
	))
	for _, tc := range []struct {
		name, tool, command string
		want                Action
		approver            string
	}{
		{"operator rule", "shell.exec", "apt-get upgrade -y", Ask, ApproverOperator},
		{"user rule", "shell.exec", "systemctl restart nginx", Ask, ""},
		{"approver unset is user", "shell.exec", "touch /tmp/x", Ask, ""},
		{"one operator part makes it the operator's", "shell.exec", "systemctl restart nginx && apt-get install vim", Ask, ApproverOperator},
		{"allowed stays allowed", "shell.exec", "ls", Allow, ""},
		{"the tool as a whole", "file.write", "", Ask, ApproverOperator},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := map[string]any{"command": tc.command}
			if tc.tool == "file.write" {
				a = map[string]any{"path": "/tmp/x", "content": "x"}
			}
			d := p.Decide(Call{PrincipalKind: "oauth", Tool: tc.tool, Args: args(t, a)})
			if d.Action != tc.want || d.Approver != tc.approver {
				t.Fatalf("got %s approver %q (rule %s), want %s approver %q", d.Action, d.Approver, d.Rule, tc.want, tc.approver)
			}
		})
	}
}

func TestNoPolicyIsNil(t *testing.T) {
	if p := mustNew(t, Default()); p != nil {
		t.Fatal("a policy without rules and default allow must compile to nil (nothing looked at)")
	}
	var p *Policy
	if d := p.Decide(Call{Tool: mcpwire.ToolShellExec}); d.Action != Allow {
		t.Fatal(d)
	}
}

func TestDecide(t *testing.T) {
	tmp := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(tmp, "etc-link")); err != nil {
		t.Fatal(err)
	}
	allowList := cfgOf(Ask,
		Rule{ID: "read-freely", Action: Allow, Tools: []string{"file.read", "file.list", "system.info", "process.list", "service.status", "job.status", "job.output", "job.wait", "job.list"}},
		Rule{ID: "inspect", Action: Allow, Commands: []string{"ls *", "cat *", "grep *", "echo *", "systemctl status *", "journalctl *"}},
		Rule{ID: "upgrade", Action: Ask, Reason: "package changes", Commands: []string{"apt-get upgrade *", "apt-get install *"}},
		Rule{ID: "restart-nginx", Action: Allow, Commands: []string{"systemctl restart nginx"}, Tools: []string{"shell.exec"}},
		Rule{ID: "units", Action: Allow, Units: []string{"nginx.service"}, Tools: []string{"service.control"}},
		Rule{ID: "no-rm", Action: Deny, Reason: "no deleting", Commands: []string{"rm"}},
		Rule{ID: "no-shadow", Action: Deny, Paths: []string{"/etc/shadow"}},
		Rule{ID: "no-kill-1", Action: Deny, PIDs: []string{"1-99"}},
		Rule{ID: "term-ok", Action: Allow, Signals: []string{"TERM"}},
		Rule{ID: "ops-only", Action: Deny, Tools: []string{"file.write"}, Principals: []Principal{{Kind: "asserted"}}},
	)
	p := mustNew(t, allowList)
	for _, tc := range []struct {
		name, tool string
		args       any
		kind       string
		want       Action
		rule       string
	}{
		{"allowed read", "file.read", map[string]any{"path": "/var/log/syslog"}, "oauth", Allow, "read-freely"},
		{"denied path", "file.read", map[string]any{"path": "/etc/shadow"}, "oauth", Deny, "no-shadow"},
		{"denied path through ..", "file.read", map[string]any{"path": "/etc/x/../shadow"}, "oauth", Deny, "no-shadow"},
		{"denied path through a symlink", "file.read", map[string]any{"path": filepath.Join(tmp, "etc-link", "shadow")}, "oauth", Deny, "no-shadow"},
		{"allowed command", "shell.exec", map[string]any{"command": "ls -la /srv | grep x"}, "oauth", Allow, "inspect"},
		{"one part unknown asks", "shell.exec", map[string]any{"command": "ls; make"}, "oauth", Ask, RuleDefault},
		{"ask rule", "shell.exec", map[string]any{"command": "apt-get upgrade -y"}, "oauth", Ask, "upgrade"},
		{"exact restart", "shell.exec", map[string]any{"command": "systemctl restart nginx"}, "oauth", Allow, "restart-nginx"},
		{"other restart asks", "shell.exec", map[string]any{"command": "systemctl restart sshd"}, "oauth", Ask, RuleDefault},
		{"restart rule is shell.exec only", "job.start", map[string]any{"command": "systemctl restart nginx"}, "oauth", Ask, RuleDefault},
		{"deny wins", "shell.exec", map[string]any{"command": "ls && rm -rf /srv"}, "oauth", Deny, "no-rm"},
		{"wrapper transparent to allow", "shell.exec", map[string]any{"command": "sudo -u www-data ls /srv"}, "oauth", Allow, "inspect"},
		{"unknown sudo option", "shell.exec", map[string]any{"command": "sudo --frobnicate ls"}, "oauth", Ask, RuleOpaque},
		{"allow needs standard path", "shell.exec", map[string]any{"command": "/tmp/ls"}, "oauth", Ask, RuleDefault},
		{"deny by base name anywhere", "shell.exec", map[string]any{"command": "/tmp/x/rm y"}, "oauth", Deny, "no-rm"},
		{"redirect to a file is opaque", "shell.exec", map[string]any{"command": "echo x > /etc/passwd"}, "oauth", Ask, RuleOpaque},
		{"redirect to /dev/null fine", "shell.exec", map[string]any{"command": "ls 2>/dev/null >&2"}, "oauth", Allow, "inspect"},
		{"dynamic arg not allowed by literal", "shell.exec", map[string]any{"command": "systemctl restart $U"}, "oauth", Ask, RuleDefault},
		{"dynamic arg allowed by *", "shell.exec", map[string]any{"command": "cat $F"}, "oauth", Allow, "inspect"},
		{"env PATH opaque", "shell.exec", map[string]any{"command": "ls", "env": map[string]string{"PATH": "/tmp"}}, "oauth", Ask, RuleOpaque},
		{"unit allowed", "service.control", map[string]any{"unit": "nginx.service", "action": "restart"}, "oauth", Allow, "units"},
		{"unit asks", "service.control", map[string]any{"unit": "ssh.service", "action": "restart"}, "oauth", Ask, RuleDefault},
		{"kill low pid", "process.kill", map[string]any{"pid": 42, "signal": "KILL"}, "oauth", Deny, "no-kill-1"},
		{"kill TERM by number", "process.kill", map[string]any{"pid": 4242, "signal": 15}, "oauth", Allow, "term-ok"},
		{"kill default signal", "process.kill", map[string]any{"pid": 4242}, "oauth", Allow, "term-ok"},
		{"kill KILL asks", "process.kill", map[string]any{"pid": 4242, "signal": "SIGKILL"}, "oauth", Ask, RuleDefault},
		{"principal rule", "file.write", map[string]any{"path": "/srv/x", "content": ""}, "asserted", Deny, "ops-only"},
		{"principal rule other kind", "file.write", map[string]any{"path": "/srv/x", "content": ""}, "oauth", Ask, RuleDefault},
		{"case-folded key is read as the tool reads it", "shell.exec", map[string]any{"Command": "rm -rf /"}, "oauth", Deny, "no-rm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(Call{PrincipalKind: tc.kind, PrincipalID: "x", Tool: tc.tool, Args: args(t, tc.args)})
			if d.Action != tc.want || d.Rule != tc.rule {
				t.Fatalf("got %s, want %s by %s", d.Describe(), tc.want, tc.rule)
			}
		})
	}
}

// TestShellParts: what the parser sees in a command line.
func TestShellParts(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		names  string // the parts' names, opaque ones as "?"
		opaque bool
	}{
		{"a; b && c || d | e", "a b c d e", false},
		{"echo $(a) `b` \"$(c)\"", "echo a b c", false},
		{"(a); { b; }; f() { c; }", "a b c", false},
		{"r''m x", "rm", false},
		{`\rm x`, "rm", false},
		{`"r"m x`, "rm", false},
		{"/usr/bin/rm x", "rm", false},
		{"X=1 env -i Y=2 nice -n 5 timeout -s KILL 5 nohup command rm x", "env nice timeout nohup command rm", false},
		{"bash -c 'rm x'", "bash rm", false},
		{"sh -e -c \"a; b\"", "sh a b", false},
		{"$X y", "?", true},
		{"eval rm", "?", true},
		{"bash -c \"$X\"", "?", true},
		{"python3 -c 'print(1)'", "?", true},
		{"cat <(a)", "cat ? a", true},
		{"/usr/bin/r? x", "?", true},
		{"{rm,x}", "?", true},
		{"find . -exec rm {} \\;", "?", true},
		{"echo x | xargs rm", "echo ?", true},
		{"awk 'BEGIN{system(\"rm x\")}'", "?", true},
		{"awk '{print $1}' f", "awk", false},
		{"sed -n '1e rm x' f", "?", true},
		{"sed -i 's/hello/world/g' f", "sed", false},
		{"bash <<EOF\nrm x\nEOF", "?", true},
		{"echo $((x+1))", "echo ?", true},
		{"echo $((1+2))", "echo", false},
		{"PATH=/tmp ls", "? ls", true},
		{"for ((i=0;i<3;i++)); do a; done", "? a", true},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var names []string
			opaque := false
			for _, p := range analyse(tc.cmd, nil) {
				if p.opaque != "" {
					names = append(names, "?")
					opaque = true
					continue
				}
				names = append(names, p.name)
			}
			if got := strings.Join(names, " "); got != tc.names || opaque != tc.opaque {
				t.Fatalf("got %q (opaque %v), want %q (opaque %v)", got, opaque, tc.names, tc.opaque)
			}
		})
	}
}
