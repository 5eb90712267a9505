package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
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
	fmt.Fprintf(o.w, "%s snapshot %s of %s (%d files)\n", o.St.OK.Render("created"), o.St.Title.Render(m.ID), snapVersion(m.Version), len(m.Files))
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
	o, st := d.out, d.out.St
	if o.json {
		return writeJSON(o.w, ls.Entries)
	}
	if ls.PendingError != nil {
		fmt.Fprintf(o.w, "%s %v\n", st.Bad.Render("warning:"), ls.PendingError)
	}
	if len(ls.Entries) == 0 {
		fmt.Fprintf(o.w, "no snapshots in %s\n", cfg.StateDir)
		return nil
	}
	headers := []string{"ID", "CREATED", "VERSION", "REASON", "FILES", "SIZE"}
	rows := make([][]string, 0, len(ls.Entries))
	notes := false
	for _, e := range ls.Entries {
		row := []string{e.ID, e.Created.Local().Format("2006-01-02 15:04:05"), snapVersion(e.Version),
			e.Reason, strconv.Itoa(e.Files), snapBytes(e.Bytes), ""}
		switch {
		case e.Error != "":
			row[6], notes = st.Bad.Render("BROKEN: "+e.Error), true
		case e.Pending:
			row[6], notes = st.Warn.Render("pending cutover"), true
		}
		rows = append(rows, row)
	}
	if notes {
		headers = append(headers, "NOTE")
	} else {
		for i := range rows {
			rows[i] = rows[i][:6]
		}
	}
	if !o.Wide {
		// The id holds the creation time (UTC) already: the CREATED column
		// is for --wide, so the table fits 80 columns.
		headers = slices.Delete(headers, 1, 2)
		for i := range rows {
			rows[i] = slices.Delete(rows[i], 1, 2)
		}
	}
	fmt.Fprintln(o.w, o.Table(headers, rows))
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
	o, st, m := d.out, d.out.St, res.Manifest
	if o.json {
		if err := writeJSON(o.w, res); err != nil {
			return err
		}
		return res.Err
	}
	kv := func(k, val string) { fmt.Fprintf(o.w, "%s %s\n", st.Title.Render(fmt.Sprintf("%-10s", k)), val) }
	kv("id", m.ID)
	kv("created", m.Created.Local().Format(time.RFC3339))
	kv("reason", m.Reason)
	kv("version", snapVersion(m.Version))
	if m.Digest != "" {
		kv("digest", m.Digest)
	}
	if m.Current.Exists {
		kv("current", m.Current.Path+" -> "+m.Current.Target)
	} else {
		kv("current", m.Current.Path+" (absent: a restore removes it)")
	}
	if res.OK {
		kv("integrity", st.OK.Render("ok")+" (every sha256 matches)")
	} else {
		kv("integrity", st.Bad.Render("CORRUPT"))
	}
	rows := make([][]string, 0, len(m.Files))
	for _, f := range m.Files {
		if !f.Exists {
			rows = append(rows, []string{f.Role, f.Path, "", "", st.Warn.Render("absent: a restore removes it")})
			continue
		}
		sum := f.SHA256[:16]
		if !o.Wide {
			sum = f.SHA256[:8] // enough to tell files apart; --wide for more
		}
		rows = append(rows, []string{f.Role, f.Path, fmt.Sprintf("%04o", uint32(f.Mode)), snapBytes(f.Size), sum})
	}
	fmt.Fprintln(o.w, o.Table([]string{"ROLE", "PATH", "MODE", "SIZE", "SHA256"}, rows))
	for _, s := range m.Sets {
		fmt.Fprintf(o.w, "restore replaces %s/%s as a set (files added since are removed)\n", s.Dir, s.Pattern)
	}
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
	o, st := d.out, d.out.St
	if o.json {
		return writeJSON(o.w, res)
	}
	verb, prefix := "removed", ""
	if dry {
		verb, prefix = "would remove", "dry run: "
	}
	if len(res.Removed) == 0 {
		fmt.Fprintf(o.w, "%snothing to prune (keeping the newest %d)\n", prefix, keep)
	}
	for _, id := range res.Removed {
		fmt.Fprintf(o.w, "%s %s\n", st.OK.Render(verb), id)
	}
	for _, id := range res.Protected {
		fmt.Fprintf(o.w, "%s %s (%s)\n", st.Warn.Render("kept"), id, res.Why[id])
	}
	if dry {
		fmt.Fprintln(o.w, "nothing was changed")
	}
	return nil
}

func snapVersion(v string) string {
	if v == "" {
		return "(none installed)"
	}
	return v
}

func snapBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
