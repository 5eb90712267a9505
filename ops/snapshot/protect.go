package snapshot

import (
	"errors"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/ops/release"
)

// Protected is a snapshot no prune may remove, and why.
type Protected struct {
	ID  string
	Why string
}

// Protect is the one rule of which snapshots a prune keeps whatever its
// count says: mcpctl snapshot prune and a confirmed cutover's own prune
// both ask it, so neither removes what the other would keep. list is
// List's (newest first); pending is the snapshot a pending cutover's marker
// names and current the release the current link points at ("" for none).
// Protected, sorted by id, each with the first reason that holds:
//
//   - pending: the pending cutover's rollback restores it (even if it is
//     missing from list: a prune must not be the one to lose it);
//   - the newest snapshot of the current release: it restores production
//     as it runs now;
//   - the newest snapshot: what `mcpctl rollback --last` restores with no
//     cutover pending, which right after a cutover is that cutover's own.
func Protect(list []Info, pending, current string) []Protected {
	why := map[string]string{}
	add := func(id, reason string) {
		if _, ok := why[id]; !ok {
			why[id] = reason
		}
	}
	if pending != "" {
		add(pending, "a pending cutover needs it")
	}
	if current != "" {
		for _, s := range list {
			if s.Manifest != nil && s.Manifest.Version == current {
				add(s.ID, "the newest snapshot of the current release "+current)
				break
			}
		}
	}
	if len(list) > 0 {
		add(list[0].ID, "the newest snapshot, what `mcpctl rollback --last` restores")
	}
	out := make([]Protected, 0, len(why))
	for id, reason := range why {
		out = append(out, Protected{ID: id, Why: reason})
	}
	slices.SortFunc(out, func(a, b Protected) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ProtectedIDs are the ids of ps, for Prune's protect.
func ProtectedIDs(ps []Protected) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// CurrentUnknownError is ReadProtected's when the current link cannot be
// read: callers word their refusal around the fact that is missing.
type CurrentUnknownError struct{ Err error }

func (e *CurrentUnknownError) Error() string { return "current release unknown: " + e.Err.Error() }
func (e *CurrentUnknownError) Unwrap() error { return e.Err }

// ReadProtected reads the facts Protect decides on, the current release and
// the snapshots in stateDir, and asks it. pending is the caller's: a
// cutover reads the whole marker (its releases are kept too). A fact that
// cannot be read is an error, so a prune removes nothing rather than guess.
// mcpctl snapshot prune and a confirmed cutover's prune both read through
// here.
func ReadProtected(stateDir string, store *release.Store, pending string) ([]Protected, error) {
	cur, err := store.Current()
	if err != nil && !errors.Is(err, release.ErrNoCurrent) {
		return nil, &CurrentUnknownError{Err: err}
	}
	list, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	return Protect(list, pending, cur), nil
}
