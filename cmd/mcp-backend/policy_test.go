package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyCheckExamples: check-policy refuses a config whose rule's
// example does not hold, naming the rule and the example, before it
// answers anything.
func TestPolicyCheckExamples(t *testing.T) {
	cfg := writeConfig(t, `{"policy":{"default":"ask","rules":[
		{"id":"inspect","action":"allow","commands":["ip *"],"examples":{"notMatch":[{"command":"ip netns exec a make"}]}},
		{"id":"no-rm","action":"deny","commands":["rm"],"examples":{"match":[{"command":"rm x"},{"command":"find . -delete"}]}}]}}`)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"mcp-backend", "check-policy", "--config", cfg, "--tool", "shell.exec", "--args", `{"command":"ls"}`}, nil, &out, &errb)
	want := `policy.rules[1].examples.match[1] = {"command":"find . -delete"}: rule no-rm must decide it, but it gets ask by rule policy.default`
	if code != 2 || !strings.Contains(errb.String(), want) || out.Len() > 0 {
		t.Fatalf("exit %d: %s%s; want exit 2 and %q", code, out.String(), errb.String(), want)
	}
}

// TestPolicyCheck: check-policy says what a call would get and which rule
// decides; bad input is a usage error naming the flag.
func TestPolicyCheck(t *testing.T) {
	// No system bus: units as the unit files say (e2e asks a real systemd).
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "no-bus"))
	cfg := writeConfig(t, `{"policy":{"default":"ask","rules":[
		{"id":"no-rm","action":"deny","reason":"no deleting","commands":["rm"]},
		{"id":"inspect","action":"allow","commands":["ls *"],"sandbox":"inspect"},
		{"id":"restart","action":"allow","commands":["systemctl restart *"]},
		{"id":"bob-reads","action":"allow","tools":["file.read"],"principals":[{"kind":"asserted","id":"bob"}]},
		{"id":"keep-host","action":"deny","units":["ssh.service","getty@.service"],"signals":["KILL"]},
		{"id":"ci","action":"allow","tools":["system.info"],"principals":[{"kind":"oauth","id":"https://auth.example.com *"}]}]},
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
		{"unit without its suffix", []string{"--tool", "service.control", "--args", `{"unit":"ssh","action":"stop"}`}, 0, "deny by rule keep-host: ssh (ssh.service)"},
		{"instance of a denied template", []string{"--tool", "service.status", "--args", `{"unit":"getty@tty1.service"}`}, 0, "deny by rule keep-host"},
		{"signal as process.kill reads it", []string{"--tool", "process.kill", "--args", `{"pid":4242,"signal":" kill "}`}, 0, "deny by rule keep-host: pid 4242 signal KILL"},
		{"oauth subject with a slash", []string{"--tool", "system.info", "--principal", "oauth:https://auth.example.com spiffe://corp/ci"}, 0, "allow by rule ci"},
		{"ip netns exec is the command it runs", []string{"--tool", "shell.exec", "--args", `{"command":"ip -n a netns exec a rm -rf /x"}`}, 0, "deny by rule no-rm (no deleting): ip -n a netns exec a rm -rf /x"},
		{"ip -all netns exec behind nice", []string{"--tool", "shell.exec", "--args", `{"command":"nice ip -all netns exec rm /x"}`}, 0, "deny by rule no-rm"},
		{"ip vrf exec", []string{"--tool", "job.start", "--args", `{"command":"ip vrf exec blue ls /"}`}, 0, "allow by rule inspect"},
		{"dynamic loader", []string{"--tool", "shell.exec", "--args", `{"command":"/lib64/ld-linux-x86-64.so.2 /bin/rm /x"}`}, 0, "deny by rule no-rm"},
		{"git -c is opaque", []string{"--tool", "shell.exec", "--args", `{"command":"git -c alias.x=!rm x"}`, "--json"}, 0, `"rule": "policy.opaque"`},
		{"tar --to-command is opaque", []string{"--tool", "shell.exec", "--args", `{"command":"tar -xf a.tar --to-command=sh"}`}, 0, "ask by rule policy.opaque (tar --to-command=sh runs a program"},
		{"busctl call is opaque", []string{"--tool", "shell.exec", "--args", `{"command":"busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager Reboot b false"}`}, 0, "ask by rule policy.opaque (busctl call asks another service to act"},
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
