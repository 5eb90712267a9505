package sshrun

import (
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/golden"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/fleet/agent"
)

func testRunner() *Runner {
	return &Runner{
		SSH: fleet.SSH{
			Binary: "ssh", KnownHosts: "/etc/mcpctl/known_hosts", Identity: "/etc/mcpctl/id_fleet",
			ConnectTimeout:      ctlconfig.Duration(10 * time.Second),
			ServerAliveInterval: ctlconfig.Duration(5 * time.Second),
			ControlPersist:      ctlconfig.Duration(60 * time.Second),
		},
		ControlDir: "/tmp/mcpctl-ssh-X",
	}
}

var web1 = &fleet.Host{Name: "web1", Address: "web1.example.com", Port: 2222, User: "root",
	Config: "/etc/mcpctl/mcpctl.json", Agent: "/usr/local/bin/mcpctl", FleetDir: "/var/lib/mcpctl-fleet"}

// TestArgvGolden pins the whole ssh command line of each remote call: every
// option explicit, the destination after "--", one word per argument.
func TestArgvGolden(t *testing.T) {
	r := testRunner()
	var b strings.Builder
	// Encoded from the agent's structs, as Facts, Upload and Start do.
	step, err := agent.ParseStep([]string{"--config", web1.Config, "--json", "--no-color", "canary", "start", "--build", "/var/lib/mcpctl-fleet/blobs/sha256-" + strings.Repeat("ef", 32), "--version", "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		prog string
		cmd  agent.Command
	}{
		{"facts", web1.Agent, &agent.Facts{Config: web1.Config}},
		{"upload", web1.Agent, &agent.Upload{FleetDir: web1.FleetDir, SHA256: strings.Repeat("ab", 32)}},
		{"start", "/var/lib/mcpctl-fleet/blobs/sha256-" + strings.Repeat("cd", 32), &agent.Start{FleetDir: web1.FleetDir, ID: "r1-web1-3-canary", Step: step}},
	} {
		c := struct {
			name   string
			remote []string
		}{c.name, append([]string{c.prog}, c.cmd.Words()...)}
		argv, err := r.Argv(web1, c.remote...)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("# " + c.name + "\n" + strings.Join(argv, "\n") + "\n\n")
	}
	golden.Check(t, "argv.golden", []byte(b.String()))
}

func TestArgvRefusesHostileWords(t *testing.T) {
	r := testRunner()
	for _, w := range []string{"a b", "$(id)", "`id`", "a;b", "a|b", "a&b", "x>y", "'q'", `"q"`, "a\nb", "~root", "*", "", "a\\b", "{a,b}x(", "!x"} {
		if _, err := r.Argv(web1, web1.Agent, "fleet-agent", w); err == nil {
			t.Errorf("remote word %q accepted", w)
		}
	}
	bad := *web1
	bad.Address = "-oProxyCommand=id"
	if _, err := r.Argv(&bad, "x"); err == nil {
		t.Error("an address starting with '-' was accepted")
	}
	bad = *web1
	bad.User = "-oProxyCommand=id"
	if _, err := r.Argv(&bad, "x"); err == nil {
		t.Error("a user starting with '-' was accepted")
	}
}
