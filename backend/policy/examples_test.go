package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRuleExamples: a rule's examples are decided with the whole policy
// when it is validated; a mismatch is an error naming the rule's key, the
// example and what decided it instead.
func TestRuleExamples(t *testing.T) {
	ex := func(cmd string) Example { return Example{Command: cmd} }
	inspect := func(e Examples) Rule {
		return Rule{ID: "inspect", Action: Allow, Commands: []string{"journalctl *", "systemctl status *", "ip *"}, Examples: e}
	}
	noVacuum := Rule{ID: "no-vacuum", Action: Deny, Commands: []string{"journalctl --vacuum-* *", "rm"}}
	for _, tc := range []struct {
		name  string
		rules []Rule
		want  string // substring of the errors; "" for valid
	}{
		{"match and notMatch hold", []Rule{inspect(Examples{
			Match:    []Example{ex("journalctl -u nginx"), ex("systemctl status nginx"), ex("ip -br addr")},
			NotMatch: []Example{ex("journalctl --vacuum-time=1d"), ex("systemctl stop nginx"), ex("ip netns exec a make")},
		}), noVacuum}, ""},
		{"match decided by another rule", []Rule{inspect(Examples{Match: []Example{ex("journalctl --vacuum-size=1M")}}), noVacuum},
			`policy.rules[0].examples.match[0] = {"command":"journalctl --vacuum-size=1M"}: rule inspect must decide it, but it gets deny by rule no-vacuum`},
		{"match not matched", []Rule{inspect(Examples{Match: []Example{ex("systemctl restart nginx")}})},
			`policy.rules[0].examples.match[0] = {"command":"systemctl restart nginx"}: rule inspect must decide it, but it gets ask by rule policy.default`},
		{"match through a runner", []Rule{inspect(Examples{Match: []Example{ex("ip netns exec a rm -rf /")}}), noVacuum},
			`rule inspect must decide it, but it gets deny by rule no-vacuum`},
		{"notMatch decided", []Rule{inspect(Examples{NotMatch: []Example{ex("systemctl status sshd")}})},
			`policy.rules[0].examples.notMatch[0] = {"command":"systemctl status sshd"}: rule inspect must not decide it, but it does: allow by rule inspect`},
		{"second rule's example", []Rule{noVacuum, inspect(Examples{Match: []Example{ex("journalctl -f")}, NotMatch: []Example{ex("journalctl -n 5")}})},
			`policy.rules[1].examples.notMatch[0]`},
		{"path example", []Rule{{ID: "secrets", Action: Deny, Paths: []string{"/etc/shadow"}, Examples: Examples{Match: []Example{{Path: "/etc/shadow"}}, NotMatch: []Example{{Path: "/etc/hosts"}}}}}, ""},
		{"unit example", []Rule{{ID: "web", Action: Ask, Units: []string{"nginx.service"}, Tools: []string{"service.control"},
			Examples: Examples{Match: []Example{{Unit: "nginx.service"}}, NotMatch: []Example{{Unit: "ssh.service"}}}}}, ""},
		{"args example", []Rule{{ID: "no-kill-system", Action: Deny, PIDs: []string{"1-999"},
			Examples: Examples{Match: []Example{{Args: json.RawMessage(`{"pid": 1, "signal": "KILL"}`)}}, NotMatch: []Example{{Args: json.RawMessage(`{"pid": 4242}`)}}}}}, ""},
		{"principal from the rule", []Rule{{ID: "ops", Action: Allow, Tools: []string{"file.write"}, Principals: []Principal{{Kind: "asserted", ID: "ops-*"}},
			Examples: Examples{Match: []Example{{Path: "/tmp/x"}}, NotMatch: []Example{{Path: "/tmp/x", Principal: "asserted:eve"}}}}}, ""},
		{"oauth scopes from the rule", []Rule{{ID: "execs", Action: Allow, Commands: []string{"make"}, Principals: []Principal{{Scopes: []string{"mcp:exec"}}},
			Examples: Examples{Match: []Example{ex("make")}, NotMatch: []Example{{Command: "make", Principal: "oauth:iss sub"}}}}}, ""},
		{"tool given", []Rule{{ID: "jobs-only", Action: Deny, Tools: []string{"job.start"}, Commands: []string{"make"},
			Examples: Examples{Match: []Example{ex("make")}, NotMatch: []Example{{Tool: "shell.exec", Command: "make"}}}}}, ""},
		{"two shorthands", []Rule{inspect(Examples{Match: []Example{{Command: "ls", Path: "/x"}}})},
			`policy.rules[0].examples.match[0] = {"command":"ls","path":"/x"}: give exactly one of command, path, unit or args`},
		{"unknown tool", []Rule{inspect(Examples{Match: []Example{{Tool: "shell.run", Command: "ls"}}})}, `tool "shell.run"`},
		{"bad principal", []Rule{inspect(Examples{Match: []Example{{Principal: "root", Command: "ls"}}})}, `principal "root"`},
		{"bad args", []Rule{inspect(Examples{Match: []Example{{Args: json.RawMessage(`[1]`)}}})}, `args must be a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := cfgOf(Ask, tc.rules...).Validate()
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

// TestRuleExamplesParse: the keys as a config file spells them; an
// unknown key in an example is an error.
func TestRuleExamplesParse(t *testing.T) {
	var r Rule
	dec := json.NewDecoder(strings.NewReader(`{"id":"a","action":"allow","commands":["ls *"],
		"examples":{"match":[{"command":"ls -l"}],"notMatch":[{"command":"rm x","tool":"job.start","principal":"operator"}]}}`))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Examples.Match) != 1 || r.Examples.NotMatch[0].Tool != "job.start" || r.Examples.NotMatch[0].Principal != "operator" {
		t.Fatalf("%+v", r.Examples)
	}
	dec = json.NewDecoder(strings.NewReader(`{"id":"a","examples":{"match":[{"cmd":"ls"}]}}`))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err == nil || !strings.Contains(err.Error(), "cmd") {
		t.Fatalf("an unknown key in an example: %v", err)
	}
}
