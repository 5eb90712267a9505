package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
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
	if c.Args().Len() > 0 {
		return usageError("snapshot create: unexpected argument %q", c.Args().First())
	}
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
	m, err := snapshot.Create(c.Context, snapshotSpec(cfg, reason))
	if err != nil {
		return err
	}
	snapAudit(d, cfg, state.Event{Action: state.ActionSnapshot, SnapshotID: m.ID, FromVersion: m.Version,
		Outcome: state.OutcomeOK, Reason: reason})
	v := newSnapView(d)
	if v.json {
		return v.writeJSON(m)
	}
	fmt.Fprintf(v.w, "%s snapshot %s of %s (%d files)\n", v.ok("created"), v.bold(m.ID), snapVersion(m.Version), len(m.Files))
	return nil
}

// snapshotSpec is what a snapshot of production covers, from the config.
func snapshotSpec(cfg *ctlconfig.Config, reason string) snapshot.Spec {
	return snapshot.Spec{
		StateDir:      cfg.StateDir,
		InstallRoot:   cfg.Install.Root,
		BackendConfig: cfg.Backend.Config,
		UnitDir:       cfg.UnitDir,
		Unit:          cfg.Backend.Unit,
		Socket:        units.Socket(cfg.Backend.Unit),
		Reason:        reason,
	}
}

// snapLock takes the mcpctl lock; contention past --lock-wait is a failed
// operation (exit 1) that names who holds it.
func snapLock(c *cli.Context, d *deps, cfg *ctlconfig.Config, owner string) (func() error, error) {
	unlock, err := stateLock(c, d, cfg.StateDir, owner)
	if err != nil {
		return nil, withCode(deploy.CodeFailed, err)
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

type snapListEntry struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Reason  string    `json:"reason"`
	Version string    `json:"version"`
	Digest  string    `json:"digest,omitempty"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
	Pending bool      `json:"pending"` // a pending cutover rolls back to it
	Error   string    `json:"error,omitempty"`
}

func snapshotList(c *cli.Context, d *deps) error {
	if c.Args().Len() > 0 {
		return usageError("snapshot list: unexpected argument %q", c.Args().First())
	}
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	list, err := snapshot.List(cfg.StateDir)
	if err != nil {
		return err
	}
	pendingID, perr := pendingSnapshot(cfg)
	entries := make([]snapListEntry, 0, len(list))
	for _, s := range list {
		e := snapListEntry{ID: s.ID, Created: s.Time(), Pending: s.ID == pendingID}
		if s.Err != nil {
			e.Error = s.Err.Error()
		}
		if m := s.Manifest; m != nil {
			e.Reason, e.Version, e.Digest, e.Files = m.Reason, m.Version, m.Digest, len(m.Files)
			for _, f := range m.Files {
				e.Bytes += f.Size
			}
		}
		entries = append(entries, e)
	}
	v := newSnapView(d)
	if v.json {
		return v.writeJSON(entries)
	}
	if perr != nil {
		fmt.Fprintf(v.w, "%s %v\n", v.bad("warning:"), perr)
	}
	if len(entries) == 0 {
		fmt.Fprintf(v.w, "no snapshots in %s\n", cfg.StateDir)
		return nil
	}
	headers := []string{"ID", "CREATED", "VERSION", "REASON", "FILES", "SIZE"}
	rows := make([][]string, 0, len(entries))
	notes := false
	for _, e := range entries {
		row := []string{e.ID, e.Created.Local().Format("2006-01-02 15:04:05"), snapVersion(e.Version),
			e.Reason, strconv.Itoa(e.Files), snapBytes(e.Bytes), ""}
		switch {
		case e.Error != "":
			row[6], notes = v.bad("BROKEN: "+e.Error), true
		case e.Pending:
			row[6], notes = v.warn("pending cutover"), true
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
	if !v.wide {
		// The id holds the creation time (UTC) already: the CREATED column
		// is for --wide, so the table fits 80 columns.
		headers = slices.Delete(headers, 1, 2)
		for i := range rows {
			rows[i] = slices.Delete(rows[i], 1, 2)
		}
	}
	fmt.Fprintln(v.w, v.out.table(headers, rows))
	return nil
}

// pendingSnapshot is the id a pending cutover needs, "" when none is pending.
func pendingSnapshot(cfg *ctlconfig.Config) (string, error) {
	p, err := state.Dir(cfg.StateDir).ReadPending()
	if err != nil {
		return "", fmt.Errorf("pending-cutover marker unreadable: %w", err)
	}
	if p == nil {
		return "", nil
	}
	return p.SnapshotID, nil
}

type snapShowResult struct {
	*snapshot.Manifest
	// OK is the verdict: every file's sha256 matches (the same as Verified).
	OK          bool   `json:"ok"`
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
}

func snapshotShow(c *cli.Context, d *deps) error {
	if c.Args().Len() != 1 {
		return usageError("snapshot show: want exactly one snapshot ID (see mcpctl snapshot list)")
	}
	id := c.Args().First()
	if err := snapshot.ValidateID(id); err != nil {
		return withCode(deploy.CodeUsage, err)
	}
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	m, err := snapshot.Load(cfg.StateDir, id)
	if err != nil {
		return err
	}
	verr := snapshot.Verify(m)
	res := snapShowResult{Manifest: m, OK: verr == nil, Verified: verr == nil}
	if verr != nil {
		res.VerifyError = verr.Error()
	}
	v := newSnapView(d)
	if v.json {
		if err := v.writeJSON(res); err != nil {
			return err
		}
		return verr
	}
	kv := func(k, val string) { fmt.Fprintf(v.w, "%s %s\n", v.bold(fmt.Sprintf("%-10s", k)), val) }
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
	if verr == nil {
		kv("integrity", v.ok("ok")+" (every sha256 matches)")
	} else {
		kv("integrity", v.bad("CORRUPT"))
	}
	rows := make([][]string, 0, len(m.Files))
	for _, f := range m.Files {
		if !f.Exists {
			rows = append(rows, []string{f.Role, f.Path, "", "", v.warn("absent: a restore removes it")})
			continue
		}
		sum := f.SHA256[:16]
		if !v.wide {
			sum = f.SHA256[:8] // enough to tell files apart; --wide for more
		}
		rows = append(rows, []string{f.Role, f.Path, fmt.Sprintf("%04o", uint32(f.Mode)), snapBytes(f.Size), sum})
	}
	fmt.Fprintln(v.w, v.out.table([]string{"ROLE", "PATH", "MODE", "SIZE", "SHA256"}, rows))
	for _, s := range m.Sets {
		fmt.Fprintf(v.w, "restore replaces %s/%s as a set (files added since are removed)\n", s.Dir, s.Pattern)
	}
	return verr
}

type snapPruneResult struct {
	DryRun    bool     `json:"dryRun"`
	Keep      int      `json:"keep"`
	Removed   []string `json:"removed"`
	Protected []string `json:"protected"`
	// Why names, per protected id, what needs it.
	Why map[string]string `json:"why"`
}

func snapshotPrune(c *cli.Context, d *deps) error {
	if c.Args().Len() > 0 {
		return usageError("snapshot prune: unexpected argument %q", c.Args().First())
	}
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
	// Read under the lock, so no cutover arms between reading and pruning.
	why, err := pruneProtected(cfg)
	if err != nil {
		return err
	}
	res := snapPruneResult{DryRun: dry, Keep: keep, Removed: []string{}, Protected: []string{}, Why: why}
	for id := range why {
		res.Protected = append(res.Protected, id)
	}
	slices.Sort(res.Protected)
	var removed []string
	if dry {
		removed, err = snapshot.PrunePlan(cfg.StateDir, keep, res.Protected...)
	} else {
		removed, err = snapshot.Prune(cfg.StateDir, keep, res.Protected...)
	}
	res.Removed = append(res.Removed, removed...)
	if len(removed) > 0 && !dry {
		snapAudit(d, cfg, state.Event{Action: state.ActionSnapshotPrune, Outcome: state.OutcomeOK,
			Details: map[string]string{"removed": strings.Join(removed, ",")}})
	}
	if err != nil {
		return err
	}
	v := newSnapView(d)
	if v.json {
		return v.writeJSON(res)
	}
	verb, prefix := "removed", ""
	if dry {
		verb, prefix = "would remove", "dry run: "
	}
	if len(removed) == 0 {
		fmt.Fprintf(v.w, "%snothing to prune (keeping the newest %d)\n", prefix, keep)
	}
	for _, id := range removed {
		fmt.Fprintf(v.w, "%s %s\n", v.ok(verb), id)
	}
	for _, id := range res.Protected {
		fmt.Fprintf(v.w, "%s %s (%s)\n", v.warn("kept"), id, why[id])
	}
	if dry {
		fmt.Fprintln(v.w, "nothing was changed")
	}
	return nil
}

// pruneProtected are the snapshots no prune may remove, with why: the facts
// read here, the rule snapshot.Protect's (the cutover's prune asks it too).
// A fact that cannot be read refuses the prune rather than guess it.
func pruneProtected(cfg *ctlconfig.Config) (map[string]string, error) {
	pendingID, err := pendingSnapshot(cfg)
	if err != nil {
		return nil, fmt.Errorf("snapshot prune: refusing, since the snapshot a rollback may need is unknown: %w", err)
	}
	cur, cerr := (&release.Store{Root: cfg.Install.Root}).Current()
	if cerr != nil && !errors.Is(cerr, release.ErrNoCurrent) {
		return nil, fmt.Errorf("snapshot prune: refusing, since the current release is unknown: %w", cerr)
	}
	list, err := snapshot.List(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	why := map[string]string{}
	for _, p := range snapshot.Protect(list, pendingID, cur) {
		why[p.ID] = p.Why
	}
	return why, nil
}

// snapView renders for people (lipgloss, plain when stdout is not a
// terminal or colour is off) or as JSON for scripts.
type snapView struct {
	w    io.Writer
	json bool
	wide bool
	r    *lipgloss.Renderer
	out  *output
}

func newSnapView(d *deps) *snapView {
	return &snapView{w: d.out.w, json: d.out.json, wide: d.out.wide, r: d.out.r, out: d.out}
}

func (v *snapView) writeJSON(x any) error {
	enc := json.NewEncoder(v.w)
	enc.SetIndent("", "  ")
	return enc.Encode(x)
}

func (v *snapView) style(color string) lipgloss.Style {
	return v.r.NewStyle().Foreground(lipgloss.Color(color)).Bold(true)
}

func (v *snapView) ok(s string) string   { return v.style("2").Render(s) }
func (v *snapView) warn(s string) string { return v.style("3").Render(s) }
func (v *snapView) bad(s string) string  { return v.style("1").Render(s) }
func (v *snapView) bold(s string) string { return v.r.NewStyle().Bold(true).Render(s) }

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
