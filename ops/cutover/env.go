package cutover

import (
	"context"
	"log/slog"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/systemd"
)

// Systemd is the part of the systemd client cutover and rollback use.
type Systemd interface {
	DaemonReload(ctx context.Context) error
	Restart(ctx context.Context, unit string) error
	ResetFailed(ctx context.Context, unit string) error
	Unit(ctx context.Context, unit string) (*systemd.UnitState, error)
	ArmTransient(ctx context.Context, t systemd.Transient) error
	DisarmTransient(ctx context.Context, timer, service string) error
	Gone(ctx context.Context, units ...string) (bool, error)
}

var _ Systemd = (*systemd.Client)(nil)

// Names of the transient rollback units (DESIGN.md §4).
const (
	RollbackTimer   = "mcpctl-rollback.timer"
	RollbackService = "mcpctl-rollback.service"
)

// Env is what cutover and rollback act on.
type Env struct {
	Config  *ctlconfig.Config
	Systemd Systemd
	Prober  *Prober
	Logger  *slog.Logger
	// MCPCtl is the absolute path of the mcpctl binary the armed timer runs,
	// and MCPCtlConfig the --config it runs with ("" for the default).
	MCPCtl       string
	MCPCtlConfig string
	// Now is time.Now when nil.
	Now func() time.Time
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Env) log() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (e *Env) backendURL() string { return "http://" + e.Config.Backend.Listen }

// rollbackArgv is the command the armed timer runs.
func (e *Env) rollbackArgv(snapshotID, nonce string) []string {
	argv := []string{e.MCPCtl}
	if e.MCPCtlConfig != "" {
		argv = append(argv, "--config", e.MCPCtlConfig)
	}
	return append(argv, "rollback", "--snapshot", snapshotID, "--nonce", nonce)
}

// tunnelFacts observes each tunnel's unit and, when probe is set, its URL's
// /readyz and (shell) a shell.exec through it.
func (e *Env) tunnelFacts(ctx context.Context, shell bool) []TunnelFact {
	var out []TunnelFact
	for _, t := range e.Config.Tunnels {
		f := TunnelFact{Name: t.Name, Unit: t.Unit}
		if st, err := e.Systemd.Unit(ctx, t.Unit); err != nil {
			f.ActiveState = "unknown: " + err.Error()
		} else {
			f.ActiveState, f.InvocationID = st.ActiveState, st.InvocationID
		}
		f.ReadyErr = e.Prober.Readyz(ctx, t.URL)
		if shell {
			f.ShellErr = e.Prober.Shell(ctx, t.URL)
		}
		out = append(out, f)
	}
	return out
}
