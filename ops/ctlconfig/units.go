package ctlconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

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
	if n := c.Approvals.Notify; n.Configured() {
		s.Notify = &units.Notify{Dir: c.ApprovalsDir(), RunSec: n.RunBound()}
	}
	return s, nil
}

// ApprovalsDir is the backend's approvals directory: approvals.dir, else
// approvals/ in backend.unit's StateDirectory.
func (c *Config) ApprovalsDir() string {
	if c.Approvals.Dir != "" {
		return c.Approvals.Dir
	}
	return filepath.Join("/var/lib", units.StateDirectory(c.Backend.Unit), "approvals")
}

// RunBound bounds one run of the notifier, in seconds (the service's
// TimeoutStartSec=): mcpctl approvals notify starts no attempt after
// NotifyRunFor, and an attempt lasts at most the timeout.
func (n Notify) RunBound() int {
	return int((NotifyRunFor + n.Timeout.D() + 30*time.Second) / time.Second)
}

// The notifier's pacing (mcpctl approvals notify): a run starts no attempt
// after NotifyRunFor (the timer's next run goes on); the pause before the
// k-th retry of an approval is k times NotifyBackoff.
const (
	NotifyRunFor  = 5 * time.Minute
	NotifyBackoff = 2 * time.Second
)
