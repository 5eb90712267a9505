package fleet

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
)

func TestWaveSizes(t *testing.T) {
	hosts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = string(rune('a' + i))
		}
		return out
	}
	sizes := func(ws []Wave) []int {
		out := []int{}
		for _, w := range ws {
			out = append(out, len(w.Hosts))
		}
		return out
	}
	cases := []struct {
		name  string
		n     int
		waves []WaveSize
		want  []int
	}{
		{"1, 50%, 100% of 3: the rest fits in wave 2", 3, []WaveSize{{Count: 1}, {Percent: 50}, {Percent: 100}}, []int{1, 2}},
		{"1, 25%, 100% of 10: 25% rounds up to 3", 10, []WaveSize{{Count: 1}, {Percent: 25}, {Percent: 100}}, []int{1, 3, 6}},
		{"the last size repeats", 7, []WaveSize{{Count: 1}, {Count: 2}}, []int{1, 2, 2, 2}},
		{"a percentage of a tiny fleet is at least 1", 2, []WaveSize{{Percent: 1}}, []int{1, 1}},
		{"a count beyond the fleet takes what is left", 2, []WaveSize{{Count: 5}}, []int{2}},
		{"one host", 1, []WaveSize{{Count: 1}, {Percent: 100}}, []int{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := Waves(hosts(c.n), c.waves)
			if got := sizes(ws); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("sizes %v, want %v", got, c.want)
			}
			for i, w := range ws {
				if w.Index != i+1 {
					t.Fatalf("wave %d has index %d", i+1, w.Index)
				}
			}
		})
	}
}

func TestParseWaves(t *testing.T) {
	inv, err := Parse(strings.NewReader(`{"hosts":[],"rollout":{"waves":[1,"25%","100%"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []WaveSize{{Count: 1}, {Percent: 25}, {Percent: 100}}
	if !reflect.DeepEqual(inv.Rollout.Waves, want) {
		t.Fatalf("waves %+v, want %+v", inv.Rollout.Waves, want)
	}
	for _, bad := range []string{`[1.5]`, `["25"]`, `["x%"]`, `[true]`, `[null]`} {
		if _, err := Parse(strings.NewReader(`{"rollout":{"waves":` + bad + `}}`)); err == nil {
			t.Errorf("waves %s parsed", bad)
		}
	}
}

// validInventory is a small valid inventory, resolved as Load would.
func validInventory(t testing.TB) *Inventory {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "mcpctl-fleet.json")
	src := `{
  "hosts": [
    {"name": "web1", "address": "web1.example.com"},
    {"name": "web2", "address": "192.0.2.7", "port": 2222, "user": "deploy", "config": "/etc/mcpctl/other.json"}
  ],
  "ssh": {"knownHosts": "known_hosts", "identity": "id_fleet"}
}`
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestLoadResolvesDefaultsAndPaths(t *testing.T) {
	inv := validInventory(t)
	dir := filepath.Dir(inv.Path)
	h1, h2 := inv.Hosts[0], inv.Hosts[1]
	want1 := Host{Name: "web1", Address: "web1.example.com", Port: 22, User: "root", Config: ctlconfig.DefaultPath, Agent: "/usr/local/bin/mcpctl", FleetDir: "/var/lib/mcpctl-fleet"}
	if h1 != want1 {
		t.Errorf("web1 = %+v, want %+v", h1, want1)
	}
	if h2.Port != 2222 || h2.User != "deploy" || h2.Config != "/etc/mcpctl/other.json" {
		t.Errorf("web2's own values lost: %+v", h2)
	}
	if inv.SSH.KnownHosts != filepath.Join(dir, "known_hosts") || inv.SSH.Identity != filepath.Join(dir, "id_fleet") {
		t.Errorf("ssh paths not relative to the inventory: %+v", inv.SSH)
	}
	if inv.LogPath() != filepath.Join(dir, "mcpctl-fleet.runs.jsonl") || inv.LockPath() != filepath.Join(dir, "mcpctl-fleet.lock") {
		t.Errorf("log %s lock %s", inv.LogPath(), inv.LockPath())
	}
}

// TestValidateNamesEveryBadValue: hostile values (options, shell syntax,
// whitespace) in any field that reaches ssh or the remote command line are
// refused, each naming its key.
func TestValidateNamesEveryBadValue(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Inventory)
		want string
	}{
		{"address as an option", func(i *Inventory) { i.Hosts[0].Address = "-oProxyCommand=touch /tmp/x" }, `hosts[0].address = "-oProxyCommand=touch /tmp/x"`},
		{"address with a user", func(i *Inventory) { i.Hosts[0].Address = "root@evil" }, "hosts[0].address"},
		{"address with a zone", func(i *Inventory) { i.Hosts[0].Address = "fe80::1%eth0" }, "hosts[0].address"},
		{"user as an option", func(i *Inventory) { i.Hosts[0].User = "-l" }, `hosts[0].user = "-l"`},
		{"user with shell", func(i *Inventory) { i.Hosts[0].User = "root;id" }, "hosts[0].user"},
		{"port out of range", func(i *Inventory) { i.Hosts[1].Port = 70000 }, "hosts[1].port = 70000"},
		{"config with a command", func(i *Inventory) { i.Hosts[0].Config = "/etc/x.json;reboot" }, "hosts[0].config"},
		{"config with command substitution", func(i *Inventory) { i.Hosts[0].Config = "/etc/$(id).json" }, "hosts[0].config"},
		{"agent with a space", func(i *Inventory) { i.Hosts[0].Agent = "/usr/bin/mcpctl --help" }, "hosts[0].agent"},
		{"relative fleet dir", func(i *Inventory) { i.Hosts[0].FleetDir = "fleet" }, "hosts[0].fleetDir"},
		{"unclean fleet dir", func(i *Inventory) { i.Hosts[0].FleetDir = "/var/lib/../../etc" }, "hosts[0].fleetDir"},
		{"name with a slash", func(i *Inventory) { i.Hosts[0].Name = "web/1" }, `hosts[0].name = "web/1"`},
		{"duplicate name", func(i *Inventory) { i.Hosts[1].Name = "web1" }, "also the name of hosts[0]"},
		{"duplicate destination", func(i *Inventory) { i.Hosts[1].Address, i.Hosts[1].Port = i.Hosts[0].Address, i.Hosts[0].Port }, "each host once"},
		{"known_hosts with a space", func(i *Inventory) { i.SSH.KnownHosts = "/etc/a /etc/b" }, "ssh.knownHosts"},
		{"no identity", func(i *Inventory) { i.SSH.Identity = "" }, "ssh.identity"},
		{"identity with a token", func(i *Inventory) { i.SSH.Identity = "/home/%u/key" }, "ssh.identity"},
		{"no hosts", func(i *Inventory) { i.Hosts = nil }, "hosts: at least one host"},
		{"no waves", func(i *Inventory) { i.Rollout.Waves = nil }, "rollout.waves"},
		{"zero wave", func(i *Inventory) { i.Rollout.Waves = []WaveSize{{Count: 0}} }, "rollout.waves[0] = 0"},
		{"percent over 100", func(i *Inventory) { i.Rollout.Waves = []WaveSize{{Percent: 150}} }, `rollout.waves[0] = "150%"`},
		{"parallelism 0", func(i *Inventory) { i.Rollout.Parallelism = 0 }, "rollout.parallelism = 0"},
		{"negative maxFailures", func(i *Inventory) { i.Rollout.MaxFailures = -1 }, "rollout.maxFailures = -1"},
		{"unknown policy", func(i *Inventory) { i.Rollout.OnFailure = "ignore" }, `rollout.onFailure = "ignore"`},
		{"steady stress", func(i *Inventory) { i.Rollout.Stress.Profile = "steady" }, "rollout.stress.profile"},
		{"sub-second timeout", func(i *Inventory) { i.SSH.ConnectTimeout = ctlconfig.Duration(500 * time.Millisecond) }, "ssh.connectTimeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv := validInventory(t)
			c.edit(inv)
			err := inv.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestUnknownKeysAreErrors(t *testing.T) {
	for _, src := range []string{
		`{"hosts":[{"name":"a","address":"a","Port":22}]}`,
		`{"ssh":{"knownhosts":"x"}}`,
		`{"rollout":{"serial":[1]}}`,
		`{"extra":1}`,
	} {
		if _, err := Parse(strings.NewReader(src)); err == nil || !strings.Contains(err.Error(), "unknown key") {
			t.Errorf("%s: %v, want an unknown key error", src, err)
		}
	}
}

// TestExampleInventory keeps the README's example true: it loads and
// validates.
func TestExampleInventory(t *testing.T) {
	inv, err := Load(filepath.Join("..", "..", "testdata", "examples", "mcpctl-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Hosts) < 2 || inv.Rollout.OnFailure != Revert {
		t.Fatalf("example: %+v", inv)
	}
}
