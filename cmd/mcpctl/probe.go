package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// probeClient is the one verify client every mcpctl probe uses: with the
// backend's bearer token when its config sets auth.bearerTokenFile. strict
// commands (those about to change production) refuse an unreadable token as
// a config error; the others (rollback, watchdog, status, verify) must still
// work in a bad state, so they warn and probe without it: /healthz and
// /readyz need no token.
func probeClient(cfg *ctlconfig.Config, strict bool, log *slog.Logger) (*verify.Client, error) {
	v, err := verify.ForBackend(cfg.Backend.Config)
	if err == nil {
		return v, nil
	}
	if strict {
		return nil, usageError("probes: %v", err)
	}
	if log != nil {
		log.Warn("probing without the bearer token", "err", err)
	}
	v, _ = verify.ForBackend("")
	return v, nil
}

// opsBase is what every command acting on production shares: the config,
// this binary (the units and the armed timer run it), the probe client and a
// systemd connection the caller closes.
type opsBase struct {
	cfg     *ctlconfig.Config
	cfgPath string // "" for the default
	self    string
	verify  *verify.Client
	sd      *systemd.Client
	// sdErr is why sd is nil (connectOpsDegraded only).
	sdErr error
}

func connectOps(c *cli.Context, strict bool, log *slog.Logger) (*opsBase, error) {
	b, err := connectOpsDegraded(c, strict, log)
	if err != nil {
		return nil, err
	}
	if b.sd == nil {
		return nil, withCode(outcome.Failed, fmt.Errorf("connect to systemd (this command needs it; `mcpctl status` and `mcpctl verify backend` run their HTTP checks without it): %w", b.sdErr))
	}
	return b, nil
}

// connectOpsDegraded is connectOps for the commands that still have
// something to show without systemd (status, verify backend): when systemd
// cannot be reached, sd is nil and sdErr says why.
func connectOpsDegraded(c *cli.Context, strict bool, log *slog.Logger) (*opsBase, error) {
	cfg, cfgPath, err := loadCtlConfig(c)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate mcpctl: %w", err)
	}
	v, err := probeClient(cfg, strict, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	sd, err := systemd.Connect(ctx, systemd.Options{Logger: log})
	if err != nil {
		return &opsBase{cfg: cfg, cfgPath: cfgPath, self: self, verify: v, sdErr: err}, nil
	}
	return &opsBase{cfg: cfg, cfgPath: cfgPath, self: self, verify: v, sd: sd}, nil
}

// noSystemd is the unit reader of a command running without systemd: every
// unit read fails, briefly (the command says once why).
type noSystemd struct{ err error }

func (n noSystemd) Unit(context.Context, string) (*unitstate.State, error) {
	return nil, errors.New("needs systemd (not reachable)")
}
