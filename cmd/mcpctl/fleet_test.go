package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/fleet"
)

func writeInventory(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mcpctl-fleet.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFleetUsageErrors: a bad inventory or argument is exit 2 naming it,
// before any host is contacted (the inventories point at no real host).
func TestFleetUsageErrors(t *testing.T) {
	good := `{"hosts":[{"name":"a","address":"127.0.0.1","port":1}],"ssh":{"knownHosts":"kh"}}`
	build := filepath.Join(t.TempDir(), "mcp-backend")
	if err := os.WriteFile(build, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		inv  string
		args []string
		want string
	}{
		{"hostile address", `{"hosts":[{"name":"a","address":"-oProxyCommand=id"}]}`, []string{"plan"}, `hosts[0].address = "-oProxyCommand=id"`},
		{"unknown key", `{"hosts":[],"waves":[1]}`, []string{"status"}, `unknown key "waves"`},
		{"bad policy", `{"hosts":[{"name":"a","address":"h"}],"rollout":{"onFailure":"pray"}}`, []string{"rollout", "--build", build, "--version", "v1"}, `rollout.onFailure = "pray"`},
		{"missing build", good, []string{"rollout", "--build", filepath.Join(t.TempDir(), "nope"), "--version", "v1"}, "--build"},
		{"hostile version", good, []string{"rollout", "--build", build, "--version", "v1;reboot"}, "--version"},
		{"missing version", good, []string{"rollout", "--build", build}, "version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeInventory(t, c.inv)
			args := append([]string{"fleet"}, c.args[0], "--inventory", p)
			args = append(args, c.args[1:]...)
			code, out, errOut := runCLI(t, args...)
			if code != 2 || !strings.Contains(out+errOut, c.want) {
				t.Fatalf("exit %d, want 2 naming %q\n%s%s", code, c.want, out, errOut)
			}
			if _, err := os.Stat(strings.TrimSuffix(p, ".json") + ".runs.jsonl"); !os.IsNotExist(err) {
				t.Fatalf("a run log was written: %v", err)
			}
		})
	}
}

// TestFleetOneRunAtATime: a rollout, resume or rollback while another
// holds the fleet lock is refused (exit 1) before any host is contacted.
func TestFleetOneRunAtATime(t *testing.T) {
	p := writeInventory(t, `{"hosts":[{"name":"a","address":"127.0.0.1","port":1}],"ssh":{"knownHosts":"kh"}}`)
	build := filepath.Join(t.TempDir(), "mcp-backend")
	if err := os.WriteFile(build, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := fleet.TakeLock(context.Background(), strings.TrimSuffix(p, ".json")+".lock", "rollout by the test", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for _, args := range [][]string{
		{"rollout", "--build", build, "--version", "v1"},
		{"resume"},
		{"rollback"},
	} {
		code, out, errOut := runCLI(t, append([]string{"--lock-wait", "0", "fleet", args[0], "--inventory", p}, args[1:]...)...)
		if code != 1 || !strings.Contains(out+errOut, "another mcpctl fleet run holds the lock") || !strings.Contains(out+errOut, "rollout by the test") {
			t.Errorf("fleet %s: exit %d, want 1 naming the holder\n%s%s", args[0], code, out, errOut)
		}
	}
}
