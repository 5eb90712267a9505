package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPolicyCheck: check-policy says what a call would get and which rule
// decides; bad input is a usage error naming the flag.
func TestPolicyCheck(t *testing.T) {
	cfg := writeConfig(t, `{"policy":{"default":"ask","rules":[
		{"id":"no-rm","action":"deny","reason":"no deleting","commands":["rm"]},
		{"id":"inspect","action":"allow","commands":["ls *"],"sandbox":"inspect"},
		{"id":"restart","action":"allow","commands":["systemctl restart *"]},
		{"id":"bob-reads","action":"allow","tools":["file.read"],"principals":[{"kind":"asserted","id":"bob"}]}]},
		"sandbox":{"allow":"root","approved":"root"}}`)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"deny wins in a list", []string{"--tool", "shell.exec", "--args", `{"command":"ls && /bin/rm -rf /x"}`}, 0, "deny by rule no-rm (no deleting): /bin/rm -rf /x"},
		{"allow", []string{"--tool", "shell.exec", "--args", `{"command":"ls /"}`, "--json"}, 0, `"rule": "inspect"`},
		{"default", []string{"--tool", "shell.exec", "--args", `{"command":"make"}`}, 0, "ask by rule policy.default"},
		{"the rule's sandbox", []string{"--tool", "shell.exec", "--args", `{"command":"ls /"}`}, 0, "allow by rule inspect: ls / [sandbox: inspect]"},
		{"the rule's sandbox as JSON", []string{"--tool", "shell.exec", "--args", `{"command":"ls /"}`, "--json"}, 0, `"sandbox": "inspect"`},
		{"the default sandbox", []string{"--tool", "shell.exec", "--args", `{"command":"systemctl restart nginx"}`}, 0, "[sandbox: root]"},
		{"the approved sandbox", []string{"--tool", "shell.exec", "--args", `{"command":"make"}`}, 0, "[sandbox once approved: root]"},
		{"parts in different sandboxes ask", []string{"--tool", "shell.exec", "--args", `{"command":"ls / && systemctl restart nginx"}`}, 0, "ask by rule policy.sandbox (its parts' rules run them in different sandboxes ((default), inspect)"},
		{"principal", []string{"--tool", "file.read", "--principal", "asserted:bob", "--args", `{"path":"/etc/hosts"}`}, 0, "allow by rule bob-reads"},
		{"other principal", []string{"--tool", "file.read", "--principal", "asserted:eve", "--args", `{"path":"/etc/hosts"}`}, 0, "ask by rule policy.default"},
		{"bad args", []string{"--tool", "shell.exec", "--args", `nope`}, 2, "--args"},
		{"bad principal", []string{"--tool", "shell.exec", "--principal", "root"}, 2, "--principal"},
		{"no tool", nil, 2, "--tool TOOL is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"mcp-backend", "check-policy", "--config", cfg}, tc.args...), nil, &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Fatalf("exit %d (want %d): %s%s; want %q", code, tc.code, out.String(), errb.String(), tc.want)
			}
		})
	}
}
