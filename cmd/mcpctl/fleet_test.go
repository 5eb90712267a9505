package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/state"
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

func TestAllowedStep(t *testing.T) {
	for _, ok := range [][]string{
		{"--config", "/c.json", "--json", "--no-color", "canary", "start", "--build", "/b"},
		{"--config", "/c.json", "--json", "cutover", "--build", "/b", "--arm-rollback"},
		{"--json", "stress", "--profile", "overload"},
		{"--config", "/c.json", "rollback", "--snapshot", "s1"},
		{"canary", "stop"},
	} {
		if err := allowedStep(ok); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
	for _, bad := range [][]string{
		{"--config", "/c.json", "install", "--build", "/b"},
		{"--config", "canary", "start"}, // "canary" is the config's value
		{"unit", "install"},
		{"fleet-agent", "start"},
		{"snapshot", "prune"},
		{},
	} {
		if err := allowedStep(bad); err == nil {
			t.Errorf("%v allowed", bad)
		}
	}
}

func TestGateCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	content := []byte("an uploaded mcpctl")
	sum := sha256.Sum256(content)
	blob := filepath.Join(blobs, "sha256-"+hex.EncodeToString(sum[:]))
	if err := os.WriteFile(blob, content, 0o755); err != nil {
		t.Fatal(err)
	}
	liar := filepath.Join(blobs, "sha256-"+strings.Repeat("0", 64))
	if err := os.WriteFile(liar, content, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cmd string
		ok        bool
	}{
		{"facts by this mcpctl", self + " fleet-agent facts --config /etc/mcpctl/mcpctl.json", true},
		{"a step with the key's config", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config /etc/mcpctl/mcpctl.json --json canary stop", true},
		{"upload by this mcpctl", self + " fleet-agent upload --fleet-dir " + dir + " --sha256 " + strings.Repeat("a", 64), true},
		{"start by an uploaded mcpctl", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- canary stop", true},
		{"wait by an uploaded mcpctl", blob + " fleet-agent wait --fleet-dir " + dir + " --id r1", true},
		{"a blob whose content is not its name", liar + " fleet-agent facts --config /etc/mcpctl/mcpctl.json", false},
		{"a program outside the fleet dir", "/bin/sh fleet-agent facts", false},
		{"a shell command", "rm -rf /", false},
		{"mcpctl outside fleet-agent", self + " cutover --build /b --arm-rollback", false},
		{"exec is not for the key", self + " fleet-agent exec --fleet-dir " + dir + " --id r1 -- cutover", false},
		{"gate itself", self + " fleet-agent gate --fleet-dir " + dir, false},
		{"shell syntax in a word", self + " fleet-agent facts --config /etc/mcpctl/mcpctl.json;id", false},
		{"command substitution", self + " fleet-agent facts --config $(id)", false},
		{"empty", "", false},
		{"upload into another dir", self + " fleet-agent upload --fleet-dir /etc --sha256 " + strings.Repeat("a", 64), false},
		{"wait in another dir", blob + " fleet-agent wait --fleet-dir /tmp --id r1", false},
		{"another config", self + " fleet-agent facts --config /tmp/evil.json", false},
		{"a step with another config", blob + " fleet-agent start --fleet-dir " + dir + " --id r1 -- --config /tmp/evil.json canary stop", false},
		{"a flag in one word", self + " fleet-agent upload --fleet-dir=/etc --sha256 " + strings.Repeat("a", 64), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			argv, err := gateCommand(dir, "/etc/mcpctl/mcpctl.json", c.cmd)
			if (err == nil) != c.ok {
				t.Fatalf("gateCommand(%q) = %v, %v; want ok %v", c.cmd, argv, err, c.ok)
			}
		})
	}
}

// TestAgentUpload: an upload is kept under its digest only when it has it;
// a cut or changed upload leaves nothing.
func TestAgentUpload(t *testing.T) {
	dir := t.TempDir()
	content := []byte("build bytes")
	sum := sha256.Sum256(content)
	hexd := hex.EncodeToString(sum[:])
	p, err := agentUpload(dir, hexd, bytes.NewReader(content))
	if err != nil || p != filepath.Join(dir, "blobs", "sha256-"+hexd) {
		t.Fatalf("upload = %q, %v", p, err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, content) {
		t.Fatal("blob content differs")
	}
	// Again: the same path, nothing rewritten.
	if p2, err := agentUpload(dir, hexd, bytes.NewReader(content)); err != nil || p2 != p {
		t.Fatalf("second upload = %q, %v", p2, err)
	}
	other := strings.Repeat("1", 64)
	if _, err := agentUpload(dir, other, bytes.NewReader(content[:5])); err == nil || !strings.Contains(err.Error(), "nothing kept") {
		t.Fatalf("a cut upload: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"+other[:8]+"*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, "blobs", ".*"))
	if len(left)+len(hidden) != 0 {
		t.Fatalf("a failed upload left %v %v", left, hidden)
	}
	if _, err := agentUpload(dir, "ABC", bytes.NewReader(nil)); err == nil {
		t.Fatal("a malformed digest was accepted")
	}
	if _, err := agentUpload("relative", hexd, bytes.NewReader(nil)); err == nil {
		t.Fatal("a relative fleet dir was accepted")
	}
}

// TestFlockHeld: the facts see the host's lock held without taking it.
func TestFlockHeld(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, state.LockFile)
	if flockHeld(lock) {
		t.Fatal("held before anyone took it")
	}
	release, err := state.Dir(dir).Lock("cutover --build x")
	if err != nil {
		t.Fatal(err)
	}
	if !flockHeld(lock) {
		t.Fatal("not seen held while taken")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if flockHeld(lock) {
		t.Fatal("still held after release")
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
	l, err := fleet.TakeLock(strings.TrimSuffix(p, ".json")+".lock", "rollout by the test")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for _, args := range [][]string{
		{"rollout", "--build", build, "--version", "v1"},
		{"resume"},
		{"rollback"},
	} {
		code, out, errOut := runCLI(t, append([]string{"fleet", args[0], "--inventory", p}, args[1:]...)...)
		if code != 1 || !strings.Contains(out+errOut, "another mcpctl fleet run holds the lock") || !strings.Contains(out+errOut, "rollout by the test") {
			t.Errorf("fleet %s: exit %d, want 1 naming the holder\n%s%s", args[0], code, out, errOut)
		}
	}
}
