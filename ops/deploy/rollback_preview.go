package deploy

import (
	"fmt"

	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/units"
)

// RollbackPreview is what a rollback would do, found without the lock,
// without systemd and without changing anything (--dry-run, and the bare
// command's help).
type RollbackPreview struct {
	Act        bool              `json:"act"`
	Reason     string            `json:"reason"`
	SnapshotID string            `json:"snapshotId,omitempty"`
	Version    string            `json:"version,omitempty"`
	Changes    []snapshot.Change `json:"changes,omitempty"`
	// Then is what follows the file changes when the rollback acts.
	Then []string `json:"then,omitempty"`
}

// PreviewRollback plans a rollback as Rollback would (PlanRollback over the
// pending marker and the snapshots in stateDir) and lists the file changes
// its restore would make. unit is backend.unit, whose slots it would use.
func PreviewRollback(stateDir, unit string, opts RollbackOptions) (*RollbackPreview, error) {
	pending, err := state.Dir(stateDir).ReadPending()
	if err != nil {
		return nil, fmt.Errorf("rollback: read pending marker: %w", err)
	}
	facts := RollbackFacts{SnapshotID: opts.SnapshotID, Nonce: opts.Nonce, IfPending: opts.IfPending, Pending: pending}
	if opts.SnapshotID == "" && pending == nil {
		if list, err := snapshot.List(stateDir); err == nil && len(list) > 0 {
			facts.Newest = list[0].ID
		}
	}
	plan := PlanRollback(facts)
	p := &RollbackPreview{Act: plan.Act, Reason: plan.Reason, SnapshotID: plan.SnapshotID}
	if !plan.Act {
		return p, nil
	}
	m, err := snapshot.Load(stateDir, plan.SnapshotID)
	if err != nil {
		return p, fmt.Errorf("load snapshot %s: %w", plan.SnapshotID, err)
	}
	p.Version = m.Version
	if p.Changes, err = snapshot.Preview(m); err != nil {
		return p, err
	}
	slots := units.SlotUnit(unit, units.SlotBlue) + "/" + units.SlotUnit(unit, units.SlotGreen)
	p.Then = []string{"re-render production's units, daemon-reload",
		"start " + m.Version + " in the idle slot of " + slots + " beside the serving one (unless one already serves it); it takes over once verified, the other hands off (the socket stays)",
		"verify the backend", "clear the pending marker"}
	if opts.Boot {
		p.Then = []string{"re-render production's units, point the slots at " + m.Version + ", daemon-reload", "clear the pending marker (the backend starts after this boot-time run)"}
	}
	return p, nil
}
