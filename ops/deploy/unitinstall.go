package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units"
)

// UnitChange is one unit mcpctl unit install writes (or, in a dry run,
// would write).
type UnitChange struct {
	Unit   string `json:"unit"`
	Action string `json:"action"` // "created" or "updated"; "would ..." in a dry run
	Diff   string `json:"diff"`
}

// UnitInstallReport is what mcpctl unit install did or, in a dry run,
// would do (its --json form).
type UnitInstallReport struct {
	DryRun    bool         `json:"dryRun"`
	UnitDir   string       `json:"unitDir"`
	Changed   []UnitChange `json:"changed"`
	Unchanged []string     `json:"unchanged"`
	Reloaded  bool         `json:"reloaded"`
	Enabled   []string     `json:"enabled"`
	// A host moved from the single unit: the slots linked to the current
	// release, and the single unit disabled (it serves until the next
	// cutover hands it off).
	LinkedSlots []string `json:"linkedSlots,omitempty"`
	Disabled    []string `json:"disabled,omitempty"`
}

// UnitSystemd is the part of the systemd client unit install acts through.
type UnitSystemd interface {
	DaemonReload(ctx context.Context) error
	Enable(ctx context.Context, units ...string) error
	Disable(ctx context.Context, units ...string) error
	UnitFileState(ctx context.Context, unit string) (string, error)
}

// UnitInstall is the rendered units compared with what unitDir holds:
// CompareUnits reads it before anything is changed or systemd connected,
// then DryRun reports the plan or Apply carries it out.
type UnitInstall struct {
	unitDir, root, single string
	units                 []units.Unit
	writes                []units.Change
	unchanged             []string
}

// CompareUnits compares the rendered units us with the files in the
// config's unit directory.
func CompareUnits(cfg *ctlconfig.Config, us []units.Unit) (*UnitInstall, error) {
	writes, unchanged, err := units.Changes(cfg.UnitDir, us)
	if err != nil {
		return nil, err
	}
	return &UnitInstall{unitDir: cfg.UnitDir, root: cfg.Install.Root, single: cfg.Backend.Unit,
		units: us, writes: writes, unchanged: unchanged}, nil
}

// enabled are the units enabled at boot.
func (u *UnitInstall) enabled() []string {
	out := []string{}
	for _, x := range u.units {
		if x.Enable {
			out = append(out, x.Name)
		}
	}
	return out
}

// change describes w: the action taken or planned and the diff from the
// installed file.
func (u *UnitInstall) change(w units.Change, create, update string) UnitChange {
	path := filepath.Join(u.unitDir, w.Unit.Name)
	action := update
	if w.Created() {
		action = create
	}
	return UnitChange{Unit: w.Unit.Name, Action: action,
		Diff: units.Diff(path+" (installed)", path+" (rendered)", string(w.Old), string(w.Unit.Content))}
}

// DryRun is unit install --dry-run: the diffs and the plan; nothing
// written, no systemd. Without systemd it cannot read whether the single
// unit is enabled: a single unit file in the unit directory is reported as
// one it would disable if so.
func (u *UnitInstall) DryRun() (*UnitInstallReport, error) {
	rep := &UnitInstallReport{DryRun: true, UnitDir: u.unitDir, Changed: []UnitChange{},
		Unchanged: append([]string{}, u.unchanged...), Enabled: u.enabled()}
	for _, w := range u.writes {
		rep.Changed = append(rep.Changed, u.change(w, "would create", "would update"))
	}
	var err error
	if _, rep.LinkedSlots, err = MissingSlotLinks(u.root); err != nil {
		return nil, fmt.Errorf("unit install: slot links: %w", err)
	}
	if _, err := os.Stat(filepath.Join(u.unitDir, u.single)); err == nil {
		rep.Disabled = append(rep.Disabled, u.single)
	}
	return rep, nil
}

// Apply is unit install: write the changed units, link the slots that have
// no link yet, daemon-reload if a unit changed, enable the boot units, and
// disable the single unit if it is enabled. The caller holds the state
// lock, so no cutover or install writes units meanwhile.
func (u *UnitInstall) Apply(ctx context.Context, sd UnitSystemd) (*UnitInstallReport, error) {
	rep := &UnitInstallReport{UnitDir: u.unitDir, Changed: []UnitChange{}, Unchanged: append([]string{}, u.unchanged...)}
	for _, w := range u.writes {
		if err := units.Write(u.unitDir, w.Unit); err != nil {
			return nil, fmt.Errorf("unit install: %w (written so far: %d of %d changed units)", err, len(rep.Changed), len(u.writes))
		}
		rep.Changed = append(rep.Changed, u.change(w, "created", "updated"))
	}
	// Before the boot slot is enabled: it must start on what runs now.
	var err error
	if rep.LinkedSlots, err = LinkMissingSlots(u.root); err != nil {
		return nil, fmt.Errorf("unit install: units written but slot links: %w", err)
	}
	if len(rep.Changed) > 0 {
		if err := sd.DaemonReload(ctx); err != nil {
			return nil, fmt.Errorf("unit install: units written but %w; run systemctl daemon-reload", err)
		}
		rep.Reloaded = true
	}
	rep.Enabled = u.enabled()
	if err := sd.Enable(ctx, rep.Enabled...); err != nil {
		return nil, fmt.Errorf("unit install: %w", err)
	}
	// The single unit would start at boot beside the boot slot without the
	// socket's descriptors and fail on its port; it keeps running now.
	if st, err := sd.UnitFileState(ctx, u.single); err == nil && st == "enabled" {
		if err := sd.Disable(ctx, u.single); err != nil {
			return nil, fmt.Errorf("unit install: disable the single unit %s: %w", u.single, err)
		}
		// systemd reads enablement (UnitFileState) again only then.
		if err := sd.DaemonReload(ctx); err != nil {
			return nil, fmt.Errorf("unit install: %w", err)
		}
		rep.Disabled = append(rep.Disabled, u.single)
	}
	return rep, nil
}
