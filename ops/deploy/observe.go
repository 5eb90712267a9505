package deploy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
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

// supervision observes every loaded service for DuplicateSupervisors.
func (e *Env) supervision(ctx context.Context) Supervision {
	cfg := e.Config
	s := Supervision{BackendUnit: cfg.Backend.Unit, CanaryUnit: cfg.Canary.Unit, WatchdogService: units.WatchdogService,
		CurrentBinary: units.CurrentBinary(cfg.Install.Root), ReleasesDir: filepath.Join(cfg.Install.Root, "releases")}
	list, err := e.listUnits(ctx)
	if err != nil {
		s.ListErr = err
		return s
	}
	active := map[string]bool{}
	for _, u := range list {
		active[u.Name] = u.ActiveState == "active"
	}
	for _, u := range list {
		if u.LoadState != "loaded" || !strings.HasSuffix(u.Name, ".service") {
			continue
		}
		f := ServiceFact{Name: u.Name, ActiveState: u.ActiveState}
		f.Exec, f.Err = e.Systemd.ExecStart(ctx, u.Name)
		// Unknown enablement or triggers count as "not live" for that reason
		// alone; the active state still decides.
		f.UnitFileState, _ = e.Systemd.UnitFileState(ctx, u.Name)
		if by, err := e.Systemd.Strings(ctx, u.Name, "TriggeredBy"); err == nil {
			for _, t := range by {
				if active[t] {
					f.ActiveTriggers = append(f.ActiveTriggers, t)
				}
			}
		}
		s.Services = append(s.Services, f)
	}
	return s
}

func (e *Env) listUnits(ctx context.Context) ([]unitstate.Listed, error) {
	if e.Systemd == nil {
		return nil, errors.New("no unit lister configured")
	}
	return e.Systemd.ListUnits(ctx)
}
