package ctlconfig

import (
	"github.com/overdeck/mcp-backend/units"

	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// FuzzParseValidate: Parse and Validate never panic, and a config Validate
// accepts is usable: the listen addresses parse, sizes and durations are in
// range, and nothing that reaches a unit file carries a control character.
// The seed corpus in testdata/fuzz runs with every `go test`.
func FuzzParseValidate(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"backend":{"listen":"127.0.0.1\nExecStartPre=/bin/touch /tmp/x\nUser=:3210"}}`))
	f.Add([]byte(`{"guardrails":{"memoryHigh":"1K","memoryMax":"1K"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(bytes.NewReader(data))
		if err != nil || c.Validate() != nil {
			return
		}
		if err := usable(c); err != nil {
			t.Fatalf("%q validates but %v", data, err)
		}
	})
}

func usable(c *Config) error {
	for _, s := range []ServiceConfig{c.Backend, c.Canary} {
		ap, err := netip.ParseAddrPort(s.Listen)
		if err != nil || ap.Port() == 0 {
			return fmt.Errorf("listen %q: %v", s.Listen, err)
		}
	}
	var unitValues []string
	unitValues = append(unitValues, c.Backend.Unit, c.Backend.Listen, c.Backend.Config, c.Canary.Unit, c.Canary.Listen, c.Canary.Config,
		c.Install.Root, c.UnitDir, c.StateDir, c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax)
	for _, t := range c.Tunnels {
		unitValues = append(unitValues, t.Name, t.Unit, t.Exec, t.URL)
	}
	for _, v := range unitValues {
		if hasControl(v) {
			return fmt.Errorf("value %q has control characters", v)
		}
	}
	for _, s := range []string{c.Guardrails.MemoryHigh, c.Guardrails.MemoryMax} {
		n, err := units.ParseSize(s)
		if err != nil || n < MinMemory {
			return fmt.Errorf("size %q = %d: %v", s, n, err)
		}
		if n != ^uint64(0) && n/10*9>>20 == 0 {
			return fmt.Errorf("size %q gives a zero Go memory limit", s)
		}
	}
	if d := c.Rollback.Deadline.D(); d < time.Second || d > 24*time.Hour {
		return fmt.Errorf("deadline %v", d)
	}
	return nil
}
