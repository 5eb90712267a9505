// Package unitstate holds the plain facts about systemd units that planners
// decide on (a unit's state, a service's ExecStart, a listed unit, a
// transient timer's description). It imports no D-Bus code, so pure planners
// and their table tests do not depend on a bus client; systemd fills
// these structs.
package unitstate

import (
	"errors"
	"time"
)

// State is a unit's state and the properties the deploy checks. Service
// fields are zero for other unit types.
type State struct {
	Name         string
	Description  string
	LoadState    string // loaded, not-found, masked, error ...
	ActiveState  string // active, inactive, failed, activating ...
	SubState     string // running, dead, exited, waiting ...
	FragmentPath string
	// InvocationID changes whenever the unit is started again (hex).
	InvocationID         string
	ActiveEnterTimestamp time.Time // zero when never active
	UnitFileState        string    // enabled, disabled, static, "" ...

	// Result is why a service or socket last failed (or "success").
	Result string

	// Service properties.
	Type           string
	MainPID        uint32
	NRestarts      uint32
	ExecMainStatus int32
	MemoryHigh     uint64 // bytes; max uint64 is infinity
	MemoryMax      uint64
	TasksMax       uint64
	CPUWeight      uint64
	LimitNOFILE    uint64
	TimeoutStop    time.Duration
	Watchdog       time.Duration
	RuntimeMax     time.Duration // RuntimeMaxSec; max uint64 microseconds is infinity
	Slice          string
	// StatusText is what the service last said with sd_notify STATUS= (a
	// production slot: standby, accepting, handing off).
	StatusText string
}

// Running reports whether a unit in activeState has processes or is about
// to: active, or on its way in or out (activating, reloading,
// deactivating). The one reading of ActiveState that the deploy and the
// backend's jobs share.
func Running(activeState string) bool {
	switch activeState {
	case "active", "activating", "reloading", "deactivating":
		return true
	}
	return false
}

// Listed is one unit systemd has loaded, as ListUnits reports it.
type Listed struct {
	Name        string
	LoadState   string
	ActiveState string
	SubState    string
}

// ExecCommand is one command of a service's ExecStart.
type ExecCommand struct {
	Path string
	Argv []string // argv[0] included
}

// Transient describes a transient timer + service pair: the timer fires once
// After its start and runs Argv as a oneshot service. The two must share
// their name (systemd does not let a transient timer name another unit), so
// Service may be left empty.
type Transient struct {
	Timer       string // e.g. "mcpctl-rollback.timer"
	Service     string // "mcpctl-rollback.service" for the timer above
	Description string
	Argv        []string
	After       time.Duration
}

// ErrAlreadyFired means a transient timer was no longer waiting when it was
// to be disarmed: it elapsed and its service runs or ran (a timer that was
// never armed looks the same once systemd has unloaded a fired one). A caller
// that only wants it gone checks Gone first.
var ErrAlreadyFired = errors.New("the timer is not armed any more: it already fired (or was never armed)")
