package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
)

// TestPolicyCheck: mcpctl policy check asks the installed backend
// (install.root's current release, or --backend-binary) about the
// production config's policy, and passes its answer, --json and exit
// code through.
func TestPolicyCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcp-backend")
	}
	dir := t.TempDir()
	backendCfg := filepath.Join(dir, "config.json")
	writeFile(t, backendCfg, `{"policy": {"default": "allow", "rules": [
		{"id": "no-rm", "action": "deny", "reason": "destructive", "commands": ["rm"]},
		{"id": "ask-touch", "action": "ask", "commands": ["touch *"]}]}}`)
	cfg := ctlconfig.Default()
	cfg.Backend.Config = backendCfg
	cfg.Install.Root = filepath.Join(dir, "root")
	cfg.StateDir = filepath.Join(dir, "state")
	ctlCfg := filepath.Join(dir, "mcpctl.json")
	b, _ := json.Marshal(cfg)
	writeFile(t, ctlCfg, string(b))

	bin := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v-policy-check")
	// Before any release: nothing to ask, unless named.
	if code, _, errb := runCtl(t, "--config", ctlCfg, "policy", "check", "--tool", "shell.exec"); code != outcome.Failed || !strings.Contains(errb, "--backend-binary") {
		t.Fatalf("without a release: exit %d %s", code, errb)
	}
	store := &release.Store{Root: cfg.Install.Root}
	if _, _, err := store.Install("v1", bin); err != nil {
		t.Fatal(err)
	}
	if err := store.SetCurrent("v1"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"deny through current", []string{"--principal", "asserted:alice", "--tool", "shell.exec", "--args", `{"command":"ls; /usr/bin/rm -rf /"}`}, 0, "no-rm", ""},
		{"ask", []string{"--tool", "shell.exec", "--args", `{"command":"touch /x"}`}, 0, "ask-touch", ""},
		{"json passes through", []string{"--json", "--tool", "shell.exec", "--args", `{"command":"rm x"}`}, 0, `"action": "deny"`, ""},
		{"named binary", []string{"--backend-binary", bin, "--tool", "file.read", "--args", `{"path":"/etc/hosts"}`}, 0, "allow", ""},
		{"the backend's usage error and code", []string{"--principal", "root", "--tool", "shell.exec"}, outcome.Usage, "", "--principal"},
		{"the backend's bad args", []string{"--tool", "shell.exec", "--args", "[1]"}, outcome.Usage, "", "--args"},
		{"tool required", []string{"--args", "{}"}, outcome.Usage, "", "--tool"},
		{"missing binary", []string{"--backend-binary", filepath.Join(dir, "nope"), "--tool", "shell.exec"}, outcome.Failed, "", "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errb := runCtl(t, append([]string{"--config", ctlCfg, "policy", "check"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errb, tc.err) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tc.code, out, errb)
			}
		})
	}

	// A rule whose example does not hold: the production config is
	// refused, naming the rule and the example, with the backend's code.
	writeFile(t, backendCfg, `{"policy": {"default": "allow", "rules": [
		{"id": "no-rm", "action": "deny", "commands": ["rm"], "examples": {"notMatch": [{"command": "ip netns exec a rm -rf /"}]}}]}}`)
	code, out, errb := runCtl(t, "--config", ctlCfg, "policy", "check", "--tool", "shell.exec", "--args", `{"command":"ls"}`)
	want := `policy.rules[0].examples.notMatch[0] = {"command":"ip netns exec a rm -rf /"}: rule no-rm must not decide it, but it does`
	if code != outcome.Usage || !strings.Contains(errb, want) {
		t.Fatalf("a failing example: exit %d (want %d)\nstdout: %s\nstderr: %s", code, outcome.Usage, out, errb)
	}
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
