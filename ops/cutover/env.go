package cutover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/unitstate"
	"github.com/overdeck/mcp-backend/ops/verify"
)

// Systemd is the part of the systemd client cutover and rollback act
// through.
type Systemd interface {
	DaemonReload(ctx context.Context) error
	Restart(ctx context.Context, unit string) error
	ResetFailed(ctx context.Context, unit string) error
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
	ArmTransient(ctx context.Context, t unitstate.Transient) error
	DisarmTransient(ctx context.Context, timer, service string) error
	Gone(ctx context.Context, units ...string) (bool, error)
	WaitGone(ctx context.Context, units ...string) error
}

// SupervisorReader reads what the duplicate-supervisor preflight needs of
// every loaded service.
type SupervisorReader interface {
	ListUnits(ctx context.Context) ([]unitstate.Listed, error)
	ExecStart(ctx context.Context, service string) ([]unitstate.ExecCommand, error)
	UnitFileState(ctx context.Context, unit string) (string, error)
	Strings(ctx context.Context, unit, property string) ([]string, error)
}

// Names of the transient rollback units (DESIGN.md §4).
const (
	RollbackTimer   = "mcpctl-rollback.timer"
	RollbackService = "mcpctl-rollback.service"
)

// Env is what cutover and rollback act on.
type Env struct {
	Config  *ctlconfig.Config
	Systemd Systemd
	// Supervisors lists loaded services for the duplicate-supervisor
	// preflight; the check reports it could not look when nil.
	Supervisors SupervisorReader
	// Verify runs every probe (verify.ForBackend builds it with the backend's
	// bearer token); a zero Client when nil.
	Verify *verify.Client
	Logger *slog.Logger
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

func (e *Env) verifier() *verify.Client {
	if e.Verify != nil {
		return e.Verify
	}
	return &verify.Client{}
}

// info asks the backend at url for its version and build within
// verify.ProbeTimeout.
func (e *Env) info(ctx context.Context, url string) (version, digest string, err error) {
	ctx, cancel := context.WithTimeout(ctx, verify.ProbeTimeout)
	defer cancel()
	return e.verifier().SystemInfo(ctx, url)
}

// checkErr is the named check of r as an error, nil when it passed.
func checkErr(r *verify.Report, name string) error {
	c := r.Check(name)
	switch {
	case c == nil:
		return fmt.Errorf("%s: did not run", name)
	case !c.OK:
		return errors.New(c.Err)
	}
	return nil
}

// rollbackArgv is the command the armed timer runs.
func (e *Env) rollbackArgv(mcpctl, snapshotID, nonce string) []string {
	argv := []string{mcpctl}
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
		if shell {
			r := e.verifier().Tunnel(ctx, t.URL)
			f.ReadyErr, f.ShellErr = checkErr(r, verify.CheckReadyz), checkErr(r, verify.CheckShellExec)
		} else {
			f.ReadyErr = e.verifier().OK(ctx, t.URL, "/readyz")
		}
		out = append(out, f)
	}
	return out
}
