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
		{"id":"inspect","action":"allow","commands":["ls *"]},
		{"id":"bob-reads","action":"allow","tools":["file.read"],"principals":[{"kind":"asserted","id":"bob"}]}]}}`)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"deny wins in a list", []string{"--tool", "shell.exec", "--args", `{"command":"ls && /bin/rm -rf /x"}`}, 0, "deny by rule no-rm (no deleting): /bin/rm -rf /x"},
		{"allow", []string{"--tool", "shell.exec", "--args", `{"command":"ls /"}`, "--json"}, 0, `"rule": "inspect"`},
		{"default", []string{"--tool", "shell.exec", "--args", `{"command":"make"}`}, 0, "ask by rule policy.default"},
		{"principal", []string{"--tool", "file.read", "--principal", "asserted:bob", "--args", `{"path":"/etc/hosts"}`}, 0, "allow by rule bob-reads"},
		{"other principal", []string{"--tool", "file.read", "--principal", "asserted:eve", "--args", `{"path":"/etc/hosts"}`}, 0, "ask by rule policy.default"},
		{"bad args", []string{"--tool", "shell.exec", "--args", `nope`}, 2, "--args"},
		{"a key in another case", []string{"--tool", "shell.exec", "--args", `{"Command":"rm -rf /x","command":"ls /"}`}, 2, `"Command"`},
		{"a key the tool does not take", []string{"--tool", "shell.exec", "--args", `{"command":"ls /","sudo":true}`}, 2, "unknown argument"},
		{"every part with its rule", []string{"--tool", "shell.exec", "--args", `{"command":"ls / && make"}`, "--json"}, 0, `"text": "make"`},
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
