package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/view"
)

func snapshotCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "create, list, show and prune rollback snapshots",
		Description: "A snapshot holds what a rollback restores: the current release's files and the\n" +
			"current link, the backend config, the backend unit, its socket unit and their\n" +
			"drop-ins, with the sha256 of every file. Snapshots live in\n" +
			"<stateDir>/snapshots/<id>/.",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "snapshot the current desired state",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "reason", Value: "manual", Usage: "why the snapshot was taken (kept in the manifest and the audit record)"},
				},
				Action: func(c *cli.Context) error { return snapshotCreate(c, d) },
			},
			{
				Name:   "list",
				Usage:  "list snapshots, newest first",
				Action: func(c *cli.Context) error { return snapshotList(c, d) },
			},
			{
				Name:      "show",
				Usage:     "show a snapshot's manifest and verify every file's sha256",
				ArgsUsage: "ID",
				Action:    func(c *cli.Context) error { return snapshotShow(c, d) },
			},
			{
				Name:  "prune",
				Usage: "keep the newest N snapshots; never the one a pending cutover or the current release needs",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "keep", Usage: "how many to keep (`N` >= 1)", DefaultText: "install.keepReleases"},
					&cli.BoolFlag{Name: "all", Usage: "remove every snapshot except the protected ones (what --keep 0 would)"},
					&cli.BoolFlag{Name: "dry-run", Usage: "print what would be removed and kept; change nothing"},
				},
				Action: func(c *cli.Context) error { return snapshotPrune(c, d) },
			},
		},
	}
}

func snapshotCreate(c *cli.Context, d *deps) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	unlock, err := snapLock(c, d, cfg, "snapshot create")
	if err != nil {
		return err
	}
	defer unlock()
	reason := c.String("reason")
	m, err := snapshot.Create(c.Context, deploy.SnapshotSpec(cfg, reason))
	if err != nil {
		return err
	}
	snapAudit(d, cfg, state.Event{Action: state.ActionSnapshot, SnapshotID: m.ID, FromVersion: m.Version,
		Outcome: state.OutcomeOK, Reason: reason})
	o := d.out
	if o.json {
		return writeJSON(o.w, m)
	}
	fmt.Fprintf(o.w, "%s snapshot %s of %s (%d files)\n", o.St.OK.Render("created"), o.St.Title.Render(m.ID), view.VersionOrNone(m.Version), len(m.Files))
	return nil
}

// snapLock takes the mcpctl lock; contention past --lock-wait is a failed
// operation (exit 1) that names who holds it.
func snapLock(c *cli.Context, d *deps, cfg *ctlconfig.Config, owner string) (func() error, error) {
	unlock, err := stateLock(c, d, cfg.StateDir, owner)
	if err != nil {
		return nil, withCode(outcome.Failed, err)
	}
	return unlock, nil
}

// audit records a decision; failing to record does not undo what was done,
// so it is logged rather than returned.
func snapAudit(d *deps, cfg *ctlconfig.Config, e state.Event) {
	if err := state.Dir(cfg.StateDir).Audit(e); err != nil {
		d.logger.Warn("audit record not written", "action", e.Action, "err", err)
	}
}

func snapshotList(c *cli.Context, d *deps) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	ls, err := snapshot.ReadListing(cfg.StateDir)
	if err != nil {
		return err
	}
	if d.out.json {
		return writeJSON(d.out.w, ls.Entries)
	}
	d.out.SnapshotList(d.out.w, ls, cfg.StateDir)
	return nil
}

func snapshotShow(c *cli.Context, d *deps) error {
	if c.Args().Len() != 1 {
		return usageError("snapshot show: want exactly one snapshot ID (see mcpctl snapshot list)")
	}
	id := c.Args().First()
	if err := snapshot.ValidateID(id); err != nil {
		return withCode(outcome.Usage, err)
	}
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	res, err := snapshot.Check(cfg.StateDir, id)
	if err != nil {
		return err
	}
	if d.out.json {
		if err := writeJSON(d.out.w, res); err != nil {
			return err
		}
		return res.Err
	}
	d.out.SnapshotShow(d.out.w, res)
	return res.Err
}

func snapshotPrune(c *cli.Context, d *deps) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	keep := cfg.Install.KeepReleases
	switch {
	case c.Bool("all") && c.IsSet("keep"):
		return usageError("snapshot prune: --all and --keep %d: give one", c.Int("keep"))
	case c.Bool("all"):
		keep = 0
	case c.IsSet("keep") && c.Int("keep") == 0:
		return usageError("snapshot prune: --keep 0 removes every snapshot a rollback could use: give --all if that is meant")
	case c.IsSet("keep"):
		keep = c.Int("keep")
		if keep < 0 {
			return usageError("snapshot prune: --keep %d: must be >= 1 (or --all)", keep)
		}
	}
	dry := c.Bool("dry-run")
	if !dry {
		unlock, err := snapLock(c, d, cfg, "snapshot prune")
		if err != nil {
			return err
		}
		defer unlock()
	}
	res, err := snapshot.PruneKeeping(cfg.StateDir, &release.Store{Root: cfg.Install.Root}, keep, dry)
	if res == nil {
		return err
	}
	if len(res.Removed) > 0 && !dry {
		snapAudit(d, cfg, state.Event{Action: state.ActionSnapshotPrune, Outcome: state.OutcomeOK,
			Details: map[string]string{"removed": strings.Join(res.Removed, ",")}})
	}
	if err != nil {
		return err
	}
	if d.out.json {
		return writeJSON(d.out.w, res)
	}
	d.out.SnapshotPrune(d.out.w, res, keep, dry)
	return nil
}
