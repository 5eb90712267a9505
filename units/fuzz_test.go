package units_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// FuzzRender: whatever mcpctl.json holds, a config that validates renders
// units with only the directives the templates write, one ExecStart each,
// and the backend's ExecStart with exactly its six arguments: no value can
// add a directive or an argument. The seed corpus runs with every go test.
func FuzzRender(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"backend":{"listen":"127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210"}}`))
	f.Add([]byte(`{"tunnels":[{"name":"a\u0085User=root","unit":"t.service","url":"https://a.example/","exec":"/bin/t %n $X"}]}`))
	f.Add([]byte(`{"guardrails":{"memoryHigh":"1K","memoryMax":"1K"}}`))
	golden, err := render(params{Config: goldenConfig(f), CanaryBinary: "/opt/mcp-backend/releases/v1/mcp-backend"})
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{}
	for _, u := range golden {
		for k := range directives(u.Content) {
			known[k] = true
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ctlconfig.Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i := range cfg.Tunnels {
			if cfg.Tunnels[i].URL == "" {
				cfg.Tunnels[i].URL = "https://t.example/"
			}
			if cfg.Tunnels[i].Exec == "" {
				cfg.Tunnels[i].Exec = "/usr/bin/tunnel"
			}
		}
		us, err := render(params{Config: cfg, CanaryBinary: units.CanaryBinary(cfg.Install.Root, "v1")})
		if err != nil {
			return
		}
		for _, u := range us {
			d := directives(u.Content)
			for k := range d {
				if !known[k] {
					t.Fatalf("%s has directive %q the templates never write:\n%s", u.Name, k, u.Content)
				}
			}
			if n := len(d["Service.ExecStart"]); n != 1 && strings.HasSuffix(u.Name, ".service") {
				t.Fatalf("%s has %d ExecStart lines", u.Name, n)
			}
			if u.Name == cfg.Backend.Unit {
				if args := strings.Fields(d["Service.ExecStart"][0]); len(args) != 6 || args[5] != cfg.Backend.Listen || args[3] != cfg.Backend.Config {
					t.Fatalf("backend ExecStart %q, want 6 arguments ending in --listen %s", d["Service.ExecStart"][0], cfg.Backend.Listen)
				}
			}
			if strings.Contains(string(u.Content), "GOMEMLIMIT=0") {
				t.Fatalf("%s renders a zero GOMEMLIMIT", u.Name)
			}
		}
	})
}
