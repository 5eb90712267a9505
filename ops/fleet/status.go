package fleet

import (
	"context"
	"fmt"
)

// HostStatus is one host in mcpctl fleet status.
type HostStatus struct {
	Host    string `json:"host"`
	Address string `json:"address"`
	Facts   *Facts `json:"facts,omitempty"`
	Error   string `json:"error,omitempty"`
	// LastRun is this host's outcome in the last run.
	LastRun Outcome `json:"lastRun,omitempty"`
}

// Status is mcpctl fleet status (its --json form): every host as read now,
// in inventory order, and the last run.
type Status struct {
	Inventory string       `json:"inventory"`
	Hosts     []HostStatus `json:"hosts"`
	LastRun   *RunState    `json:"lastRun,omitempty"`
}

// NewStatus joins what was observed of every host of inv with its outcome
// in rs, the last run (nil for none).
func NewStatus(inv *Inventory, obs map[string]Observed, rs *RunState) *Status {
	st := &Status{Inventory: inv.Path, LastRun: rs}
	for _, h := range inv.Hosts {
		hs := HostStatus{Host: h.Name, Address: fmt.Sprintf("%s@%s:%d", h.User, h.Address, h.Port)}
		o := obs[h.Name]
		hs.Facts = o.Facts
		if o.Err != nil {
			hs.Error = o.Err.Error()
		}
		if rs != nil && rs.Hosts[h.Name] != nil {
			hs.LastRun = rs.Hosts[h.Name].Outcome
		}
		st.Hosts = append(st.Hosts, hs)
	}
	return st
}

// Unreadable is the first host whose facts could not be read, nil when
// every host's were.
func (s *Status) Unreadable() *HostStatus {
	for i := range s.Hosts {
		if s.Hosts[i].Error != "" {
			return &s.Hosts[i]
		}
	}
	return nil
}

// Status observes every host and reads the last run from the run log. A
// log that cannot be read (or only in part) shows what it holds: status
// is for the hosts, the run log is beside the point.
func (r *Runner) Status(ctx context.Context) *Status {
	obs := r.Observe(ctx)
	events, _ := r.Log.Read()
	return NewStatus(r.Inv, obs, LastRun(events))
}
