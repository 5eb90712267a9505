package deploy

import (
	"context"
	"errors"
	"fmt"

	"github.com/overdeck/mcp-backend/ops/verify"
)

// Names of the transient rollback units a cutover arms.
const (
	RollbackTimer   = "mcpctl-rollback.timer"
	RollbackService = "mcpctl-rollback.service"
)

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
