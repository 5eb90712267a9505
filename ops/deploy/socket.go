package deploy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/units"
)

// SocketFact is the socket unit that owns production's port (see
// units.Socket): it must outlive every restart of the backend, so a cutover
// and a rollback compare it before and after.
type SocketFact struct {
	Unit        string
	LoadState   string
	ActiveState string
	// InvocationID and ActiveEnter change whenever the socket is started
	// again (its port was closed in between).
	InvocationID string
	ActiveEnter  time.Time
	Err          error
}

// Loaded reports a socket unit systemd knows (an installation older than
// the socket unit has none).
func (s *SocketFact) Loaded() bool {
	return s != nil && s.Err == nil && s.LoadState != "" && s.LoadState != "not-found"
}

// Active reports a socket that listens (or holds a running service's
// connection, "running").
func (s *SocketFact) Active() bool { return s != nil && s.Err == nil && s.ActiveState == "active" }

// Same reports whether b is the same, uninterrupted run of socket s.
func (s *SocketFact) Same(b *SocketFact) bool {
	return s.Active() && b.Active() && s.InvocationID == b.InvocationID && s.ActiveEnter.Equal(b.ActiveEnter)
}

func (s *SocketFact) String() string {
	if s.Err != nil {
		return "unknown: " + s.Err.Error()
	}
	return fmt.Sprintf("%s (invocation %s since %s)", s.ActiveState, s.InvocationID, s.ActiveEnter.UTC().Format(time.RFC3339Nano))
}

// socketUnit is the socket unit of production.
func (e *Env) socketUnit() string { return units.Socket(e.Config.Backend.Unit) }

// socketFact observes the socket unit of a backend service.
func (e *Env) socketFact(ctx context.Context, unit string) *SocketFact {
	f := &SocketFact{Unit: unit}
	st, err := e.Systemd.Unit(ctx, unit)
	if err != nil {
		f.Err = err
		return f
	}
	f.LoadState, f.ActiveState, f.InvocationID, f.ActiveEnter = st.LoadState, st.ActiveState, st.InvocationID, st.ActiveEnterTimestamp
	return f
}

// snapshotHasSocket reports whether snapshot m holds a socket unit file
// (a snapshot taken before the socket unit existed records it as absent).
func snapshotHasSocket(m *snapshot.Manifest, unitDir, socket string) bool {
	p := filepath.Join(filepath.Clean(unitDir), socket)
	for _, f := range m.Files {
		if f.Path == p {
			return f.Exists
		}
	}
	return false
}

// settleSocket makes the socket unit agree with a restored snapshot before
// the backend restarts: with no socket file in the snapshot the restored
// service binds its port itself, so the socket must let go of it; with one,
// a socket that failed (its service hit the start limit) is reset so the
// restart can start it again. A socket that listens is never touched.
func (e *Env) settleSocket(ctx context.Context, hasSocket bool) error {
	unit := e.socketUnit()
	s := e.socketFact(ctx, unit)
	if s.Err != nil {
		return s.Err
	}
	switch {
	case !hasSocket && (s.Active() || s.ActiveState == "failed"):
		if err := e.Systemd.Stop(ctx, unit); err != nil {
			return fmt.Errorf("stop %s (the restored backend binds its port itself): %w", unit, err)
		}
		_ = e.Systemd.ResetFailed(ctx, unit)
	case hasSocket && s.ActiveState == "failed":
		if err := e.Systemd.ResetFailed(ctx, unit); err != nil {
			return fmt.Errorf("reset-failed %s: %w", unit, err)
		}
	}
	return nil
}

// errSocketRestarted is a socket whose run changed across a cutover.
var errSocketRestarted = errors.New("the socket was stopped or restarted: its port closed")
