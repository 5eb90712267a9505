package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/notify"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/units"
)

func unitCommand(d *deps) *cli.Command {
	mcpctlFlag := &cli.StringFlag{Name: "mcpctl", Usage: "mcpctl binary the units run (`PATH`; default: this mcpctl)"}
	return &cli.Command{
		Name:  "unit",
		Usage: "render or install the systemd units",
		Subcommands: []*cli.Command{
			{
				Name:      "render",
				Usage:     "print the units (or write them into a directory); touches nothing else",
				UsageText: "mcpctl unit render [--out DIR] [--canary-version V] [--mcpctl PATH]",
				Description: "The watchdog, pending-rollback and rollback units run mcpctl: the units name\n" +
					"this mcpctl's own path (or --mcpctl PATH) and, when --config was given, that\n" +
					"config file's absolute path. Render with the binary and config the host\n" +
					"will use.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "out", Usage: "write the units into `DIR` instead of printing them"},
					&cli.StringFlag{Name: "canary-version", Usage: "also render the canary unit, running release `V`"},
					mcpctlFlag,
				},
				Action: func(c *cli.Context) error { return unitRender(c, d) },
			},
			{
				Name:      "install",
				Usage:     "write changed units into unitDir, daemon-reload if any changed, enable the boot units",
				UsageText: "mcpctl unit install [--mcpctl PATH] [--dry-run]",
				Description: "Like unit render, the units name this mcpctl's path (or --mcpctl PATH) and\n" +
					"the --config file's absolute path. --dry-run shows the diff of every unit\n" +
					"and the plan first.",
				Flags:  []cli.Flag{mcpctlFlag, &cli.BoolFlag{Name: "dry-run", Usage: "print the diff of every unit and the plan; write nothing"}},
				Action: func(c *cli.Context) error { return unitInstall(c, d) },
			},
		},
	}
}

// renderUnits loads the config and renders the units; every problem with
// the config or the flags is a usage error (exit 2), found before anything
// is written.
func renderUnits(c *cli.Context, canaryVersion string) (*ctlconfig.Config, []units.Unit, error) {
	cfg, cfgPath, err := loadCtlConfig(c)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ValidateTunnels(); err != nil {
		return nil, nil, usageError("config: %v", err)
	}
	mcpctl := c.String("mcpctl")
	if mcpctl == "" {
		if mcpctl, err = os.Executable(); err != nil {
			return nil, nil, fmt.Errorf("locate mcpctl: %w", err)
		}
	}
	spec, err := cfg.UnitSpec()
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	p := units.Params{Spec: spec, MCPCtl: mcpctl, MCPCtlConfig: cfgPath}
	if canaryVersion != "" {
		if strings.ContainsAny(canaryVersion, "/ \t\n") || canaryVersion == "." || canaryVersion == ".." {
			return nil, nil, usageError("--canary-version %q: must be a release name (no slashes or spaces)", canaryVersion)
		}
		p.CanaryBinary = units.CanaryBinary(cfg.Install.Root, canaryVersion)
	}
	us, err := units.Render(p)
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	return cfg, us, nil
}

type renderedUnit struct {
	Name    string `json:"name"`
	Enable  bool   `json:"enable"`
	Content string `json:"content"`
}

func unitRender(c *cli.Context, d *deps) error {
	_, us, err := renderUnits(c, c.String("canary-version"))
	if err != nil {
		return err
	}
	if out := c.String("out"); out != "" {
		if err := units.Write(out, us...); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		for _, u := range us {
			if !d.out.json {
				fmt.Fprintln(d.stdout, filepath.Join(out, u.Name))
			}
		}
	}
	if d.out.json {
		list := make([]renderedUnit, 0, len(us))
		for _, u := range us {
			list = append(list, renderedUnit{u.Name, u.Enable, string(u.Content)})
		}
		return writeJSON(d.stdout, list)
	}
	if c.String("out") != "" {
		return nil
	}
	for i, u := range us {
		if i > 0 {
			fmt.Fprintln(d.stdout)
		}
		// Like systemctl cat: the file each block belongs in.
		fmt.Fprintf(d.stdout, "# unit %s\n%s", u.Name, u.Content)
	}
	return nil
}

func unitInstall(c *cli.Context, d *deps) error {
	cfg, us, err := renderUnits(c, "")
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		return unitInstallDryRun(d, cfg, us)
	}
	// One mutating mcpctl at a time: a cutover or install between our
	// read and our write would have its units overwritten.
	unlock, err := stateLock(c, d, cfg.StateDir, "unit install")
	if err != nil {
		return withCode(outcome.Failed, fmt.Errorf("unit install: nothing written: %w", err))
	}
	defer unlock()
	ui, err := deploy.CompareUnits(cfg, us)
	if err != nil {
		return withCode(outcome.Failed, err)
	}
	// Connect before writing: without systemd the new files would sit
	// there unloaded, so fail with nothing changed instead.
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
	defer cancel()
	sd, err := systemd.Connect(ctx, systemd.Options{Logger: d.logger})
	if err != nil {
		return withCode(outcome.Failed, fmt.Errorf("unit install: nothing written: %w", err))
	}
	defer sd.Close()
	rep, err := ui.Apply(ctx, sd)
	if err != nil {
		return withCode(outcome.Failed, err)
	}
	notified, err := notify.Install(ctx, cfg, sd)
	if err != nil {
		return withCode(deploy.CodeFailed, err)
	}
	// Units in place say nothing about production: with it down, say so
	// instead of a success that would look like "all is well".
	o, oerr := deploy.ObserveOutage(ctx, sd, cfg.Backend.Unit)
	if oerr != nil {
		d.logger.Warn("unit install: read production's units", "err", oerr)
	}
	if d.out.json {
		if err := writeJSON(d.stdout, rep); err != nil {
			return err
		}
	} else {
		d.out.UnitInstall(d.out.w, rep)
		if notified {
			fmt.Fprintf(d.out.w, "approvals notifier: %s and %s started; NEEDS_APPROVAL tells clients the operator is notified\n", units.NotifyPath, units.NotifyTimer)
		}
	}
	return deploy.DownError(o, "unit install starts nothing")
}

// unitInstallDryRun is unit install --dry-run: the same comparison and
// diffs, then the plan; no lock, no systemd, nothing written.
func unitInstallDryRun(d *deps, cfg *ctlconfig.Config, us []units.Unit) error {
	ui, err := deploy.CompareUnits(cfg, us)
	if err != nil {
		return withCode(outcome.Failed, err)
	}
	rep, err := ui.DryRun()
	if err != nil {
		return withCode(outcome.Failed, err)
	}
	if d.out.json {
		return writeJSON(d.stdout, rep)
	}
	d.out.UnitInstall(d.out.w, rep)
	return nil
}
