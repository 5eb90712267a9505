package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
)

// PendingID is the snapshot a pending cutover needs, "" when none is
// pending.
func PendingID(stateDir string) (string, error) {
	p, err := state.Dir(stateDir).ReadPending()
	if err != nil {
		return "", fmt.Errorf("pending-cutover marker unreadable: %w", err)
	}
	if p == nil {
		return "", nil
	}
	return p.SnapshotID, nil
}

// ListEntry is one snapshot as mcpctl snapshot list shows it (its --json
// form).
type ListEntry struct {
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

// Listing is mcpctl snapshot list: the snapshots, newest first, and why the
// pending marker could not be read, if so (a warning: the list is still
// worth showing).
type Listing struct {
	Entries      []ListEntry
	PendingError error
}

// ReadListing lists the snapshots in stateDir, marking the one a pending
// cutover needs.
func ReadListing(stateDir string) (*Listing, error) {
	list, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	pendingID, perr := PendingID(stateDir)
	return &Listing{Entries: Entries(list, pendingID), PendingError: perr}, nil
}

// Entries are list's snapshots as listed, the one pending names marked.
func Entries(list []Info, pending string) []ListEntry {
	entries := make([]ListEntry, 0, len(list))
	for _, s := range list {
		e := ListEntry{ID: s.ID, Created: s.Time(), Pending: s.ID == pending}
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
	return entries
}

// Checked is mcpctl snapshot show: the manifest and the verdict of
// verifying every file's sha256.
type Checked struct {
	*Manifest
	// OK is the verdict: every file's sha256 matches (the same as Verified).
	OK          bool   `json:"ok"`
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
	// Err is Verify's error, nil when OK.
	Err error `json:"-"`
}

// Check loads snapshot id and verifies it. The error is Load's; a snapshot
// that loads but does not verify is a Checked with Err set.
func Check(stateDir, id string) (*Checked, error) {
	m, err := Load(stateDir, id)
	if err != nil {
		return nil, err
	}
	verr := Verify(m)
	res := &Checked{Manifest: m, OK: verr == nil, Verified: verr == nil, Err: verr}
	if verr != nil {
		res.VerifyError = verr.Error()
	}
	return res, nil
}

// PruneResult is mcpctl snapshot prune's (its --json form).
type PruneResult struct {
	DryRun    bool     `json:"dryRun"`
	Keep      int      `json:"keep"`
	Removed   []string `json:"removed"`
	Protected []string `json:"protected"`
	// Why names, per protected id, what needs it.
	Why map[string]string `json:"why"`
}

// PruneKeeping removes all but the newest keep snapshots in stateDir (with
// dryRun, only says which), never one Protect protects. The caller holds
// the state lock unless dryRun, so no cutover arms between reading the
// facts and pruning. A fact that cannot be read refuses the prune (nil
// result); otherwise the result lists what was removed even when a removal
// failed, so that it can be recorded.
func PruneKeeping(stateDir string, store *release.Store, keep int, dryRun bool) (*PruneResult, error) {
	pendingID, err := PendingID(stateDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot prune: refusing, since the snapshot a rollback may need is unknown: %w", err)
	}
	protected, err := ReadProtected(stateDir, store, pendingID)
	if cu := (*CurrentUnknownError)(nil); errors.As(err, &cu) {
		return nil, fmt.Errorf("snapshot prune: refusing, since the current release is unknown: %w", cu.Err)
	}
	if err != nil {
		return nil, err
	}
	res := &PruneResult{DryRun: dryRun, Keep: keep, Removed: []string{}, Protected: []string{}, Why: map[string]string{}}
	for _, p := range protected {
		res.Why[p.ID] = p.Why
		res.Protected = append(res.Protected, p.ID)
	}
	slices.Sort(res.Protected)
	var removed []string
	if dryRun {
		removed, err = PrunePlan(stateDir, keep, res.Protected...)
	} else {
		removed, err = Prune(stateDir, keep, res.Protected...)
	}
	res.Removed = append(res.Removed, removed...)
	return res, err
}
