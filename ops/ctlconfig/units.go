package ctlconfig

import (
	"errors"
	"fmt"

	"github.com/overdeck/mcp-backend/units"
)

// UnitSpec validates the config, tunnels included (a unit needs their exec),
// and returns what the units are rendered from.
func (c *Config) UnitSpec() (*units.Spec, error) {
	if c == nil {
		return nil, errors.New("render units: no config")
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("render units: %w", err)
	}
	if err := c.ValidateTunnels(); err != nil {
		return nil, fmt.Errorf("render units: %w", err)
	}
	g := c.Guardrails
	s := &units.Spec{
		Backend:     units.Service{Unit: c.Backend.Unit, Listen: c.Backend.Listen, Config: c.Backend.Config},
		Canary:      units.Service{Unit: c.Canary.Unit, Listen: c.Canary.Listen, Config: c.Canary.Config},
		InstallRoot: c.Install.Root,
		Guardrails: units.Guardrails{TasksMax: g.TasksMax, LimitNOFILE: g.LimitNOFILE, MemoryHigh: g.MemoryHigh,
			MemoryMax: g.MemoryMax, CPUWeight: g.CPUWeight, TimeoutStopSec: g.TimeoutStopSec, SocketBacklog: g.SocketBacklog,
			JobsMemoryMax: g.JobsMemoryMax, JobsTasksMax: g.JobsTasksMax},
	}
	for _, t := range c.Tunnels {
		s.Tunnels = append(s.Tunnels, units.Tunnel{Name: t.Name, Unit: t.Unit, Exec: t.Exec})
	}
	return s, nil
}
