package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStdioArgumentsDecodedOnce: over the real binary's stdio (no HTTP
// intake in front), an argument object with a key given twice, in any
// case, is refused INVALID_ARGUMENT naming it before the policy asks
// about it: no approval is made and nothing runs.
func TestStdioArgumentsDecodedOnce(t *testing.T) {
	dir := t.TempDir()
	approvals := filepath.Join(dir, "approvals")
	cfg := writeConfig(t, fmt.Sprintf(`{"policy":{"rules":[{"id":"ask-apt","action":"ask","commands":["apt-get *"]},{"id":"ask-touch","action":"ask","commands":["touch *"]}],"approvals":{"dir":%q}}}`, approvals))
	_, in, out := startStdio(t, cfg)
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	call := func(line string) string {
		t.Helper()
		if _, err := fmt.Fprintln(in, line); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() {
			t.Fatalf("no reply to %s", line)
		}
		return sc.Text()
	}
	call(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	x := filepath.Join(dir, "X")
	for i, tc := range []struct{ name, args, key string }{
		{"the same key twice", `{"command":"touch ` + x + `","command":"apt-get update"}`, `\"command\"`},
		{"the same key twice, swapped", `{"command":"apt-get update","command":"touch ` + x + `"}`, `\"command\"`},
		{"a key in another case", `{"Command":"touch ` + x + `","command":"apt-get update"}`, `\"Command\"`},
		{"twice in env", `{"command":"apt-get update","env":{"A":"1","A":"2"}}`, `\"env.A\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := call(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"shell.exec","arguments":%s}}`, i+2, tc.args))
			var r struct {
				Result struct {
					IsError bool `json:"isError"`
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(reply), &r); err != nil || !r.Result.IsError || len(r.Result.Content) == 0 {
				t.Fatalf("reply %s (%v)", reply, err)
			}
			if text := r.Result.Content[0].Text; !strings.Contains(text, "INVALID_ARGUMENT") || !strings.Contains(text, tc.key) {
				t.Errorf("got %s, want INVALID_ARGUMENT naming %s", text, tc.key)
			}
		})
	}
	if ents, _ := os.ReadDir(approvals); len(ents) != 0 {
		t.Errorf("approvals made for refused arguments: %v", ents)
	}
	if _, err := os.Stat(x); err == nil {
		t.Error("something ran")
	}
}
