// Package unitstatetest is a systemd seen through fixed unit states, for
// the tests of what reads units through a small interface (status, the
// stress sampler) without a bus.
package unitstatetest

import (
	"context"
	"errors"

	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// ErrUnreadable is what Fixed answers for a unit mapped to nil.
var ErrUnreadable = errors.New("D-Bus gone")

// Fixed maps unit names to their states: a unit mapped to nil cannot be
// read (ErrUnreadable); one absent is not found, as systemd reports it.
type Fixed map[string]*unitstate.State

// Unit returns name's fixed state.
func (u Fixed) Unit(_ context.Context, name string) (*unitstate.State, error) {
	if st, ok := u[name]; ok {
		if st == nil {
			return nil, ErrUnreadable
		}
		return st, nil
	}
	return &unitstate.State{Name: name, LoadState: "not-found", ActiveState: "inactive"}, nil
}
