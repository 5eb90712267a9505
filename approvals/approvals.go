// Package approvals is the store of pending approvals: calls the backend's
// policy asks about when no one could be asked in the client, waiting for
// the operator (mcpctl approvals). The backend creates them and runs what
// was approved; mcpctl lists and decides them. Both sides share this one
// package (it links nothing of backend/), and a directory: one file per
// approval (ID.json), its decision (ID.decision) and its run (ID.claim,
// ID.job), each decision and each claim created exclusively (O_EXCL), so
// a call is decided once and runs at most once, whichever process (two
// backends during a cutover, two operators) gets there first. An approval
// approved for a while (Grant) is a grant: its exact call runs, unclaimed,
// as often as it is sent until the grant ends or is revoked (ID.revoked).
package approvals

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/internal/randid"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Errors of Decide and Get.
var (
	ErrNotFound = errors.New("no such approval")
	ErrDecided  = errors.New("already decided")
	ErrExpired  = errors.New("expired")
)

// Record is an approval as stored: what mcpctl shows, and the digest that
// binds it to exactly one call.
type Record struct {
	mcpwire.Approval
	// Digest is the call's digest (principal, tool, canonical arguments).
	Digest string `json:"digest"`
	// Grant is set when the approval was approved for a while.
	Grant *GrantInfo `json:"grant,omitempty"`
	// Ran is set once its call was taken to run (claimed).
	Ran bool `json:"ran,omitempty"`
}

// GrantInfo is a grant's span: its call runs until Until, unless revoked.
type GrantInfo struct {
	Until     time.Time  `json:"until"`
	Live      bool       `json:"live"`
	RevokedBy string     `json:"revokedBy,omitempty"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// MaxGrant bounds a grant: a yes for the same call lasts a day at most.
const MaxGrant = 24 * time.Hour

// ErrNotGrant is Revoke's error for an approval that is no live grant.
var ErrNotGrant = errors.New("not a live grant")

type decision struct {
	Approve bool      `json:"approve"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	// Until is a grant's end (zero: the call runs once).
	Until time.Time `json:"until,omitzero"`
}

type revocation struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// End is when the approval stops mattering: its expiry, or its grant's end.
func (r Record) End() time.Time {
	if r.Grant != nil && r.Grant.Until.After(r.ExpiresAt) {
		return r.Grant.Until
	}
	return r.ExpiresAt
}

// Store is a directory of approvals.
type Store struct {
	dir string
	now func() time.Time
}

// Open returns the store in dir. The directory is made (0700) with the
// first approval: a backend whose policy never asks leaves no trace.
func Open(dir string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("approvals: %q is not an absolute directory", dir)
	}
	return &Store{dir: dir, now: now}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// NewID returns a fresh approval id ("a" and 16 hex digits).
func NewID() string { return randid.New('a') }

// ValidID reports whether id is one NewID makes (so it names a file in
// the store and nothing else).
func ValidID(id string) bool { return randid.Valid('a', id) }

func (s *Store) path(id, ext string) string { return filepath.Join(s.dir, id+ext) }

// Create stores a new pending approval.
func (s *Store) Create(r Record) error {
	if !ValidID(r.ID) {
		return fmt.Errorf("approvals: bad id %q", r.ID)
	}
	r.Status = mcpwire.ApprovalPending
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	if err := atomicfs.WriteFile(s.path(r.ID, ".json"), b, 0o600); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	return nil
}

// Get returns one approval with its status now.
func (s *Store) Get(id string) (Record, error) {
	if !ValidID(id) {
		return Record{}, fmt.Errorf("%w: %q is not an approval id (a and 16 hex digits)", ErrNotFound, id)
	}
	b, err := os.ReadFile(s.path(id, ".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("approvals: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("approvals: %s: %w", id, err)
	}
	r.Status = mcpwire.ApprovalPending
	if b, err := os.ReadFile(s.path(id, ".job")); err == nil {
		r.JobID = strings.TrimSpace(string(b))
	}
	r.Ran = r.JobID != "" || s.Claimed(id)
	now := s.now()
	expired := now.After(r.ExpiresAt)
	if d, ok := s.decision(id); ok {
		r.Status = mcpwire.ApprovalDenied
		if d.Approve && !d.Until.IsZero() {
			// A grant: live until its end (never beyond MaxGrant from its
			// decision, whatever the file says) or its revocation.
			g := &GrantInfo{Until: d.Until}
			var rv revocation
			if b, err := os.ReadFile(s.path(id, ".revoked")); err == nil && json.Unmarshal(b, &rv) == nil {
				g.RevokedBy, g.RevokedAt = rv.By, &rv.At
			}
			g.Live = g.RevokedAt == nil && now.Before(d.Until) && !d.Until.After(d.At.Add(MaxGrant))
			r.Grant, r.Status = g, mcpwire.ApprovalApproved
			if !g.Live {
				r.Status = mcpwire.ApprovalExpired
			}
		} else if d.Approve {
			r.Status = mcpwire.ApprovalApproved
			// The expiry is the expiry: an approval whose call did not
			// come back in time runs nothing.
			if expired && r.JobID == "" && !s.Claimed(id) {
				r.Status = mcpwire.ApprovalExpired
			}
		}
		r.DecidedBy, r.DecidedAt = d.By, &d.At
	} else if expired {
		r.Status = mcpwire.ApprovalExpired
	}
	return r, nil
}

func (s *Store) decision(id string) (decision, bool) {
	var d decision
	b, err := os.ReadFile(s.path(id, ".decision"))
	if err != nil || json.Unmarshal(b, &d) != nil {
		return d, false
	}
	return d, true
}

// List returns every approval, oldest first.
func (s *Store) List() ([]Record, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // none yet
	}
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	var out []Record
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidID(id) {
			continue
		}
		r, err := s.Get(id)
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Decide approves or denies a pending approval, once: a second decision,
// or one after it expired, is refused.
func (s *Store) Decide(id string, approve bool, by string) (Record, error) {
	return s.decide(id, decision{Approve: approve, By: by, At: s.now().UTC()})
}

func (s *Store) decide(id string, dec decision) (Record, error) {
	r, err := s.Get(id)
	if err != nil {
		return r, err
	}
	switch r.Status {
	case mcpwire.ApprovalExpired:
		return r, fmt.Errorf("%s: %w at %s", id, ErrExpired, r.ExpiresAt.Format(time.RFC3339))
	case mcpwire.ApprovalApproved, mcpwire.ApprovalDenied:
		return r, fmt.Errorf("%s: %w (%s by %s)", id, ErrDecided, r.Status, r.DecidedBy)
	}
	b, _ := json.Marshal(dec)
	err = writeExclusive(s.path(id, ".decision"), b)
	if errors.Is(err, fs.ErrExist) {
		r, _ = s.Get(id)
		return r, fmt.Errorf("%s: %w (%s by %s)", id, ErrDecided, r.Status, r.DecidedBy)
	}
	if err != nil {
		return r, fmt.Errorf("approvals: %w", err)
	}
	return s.Get(id)
}

// Grant approves a pending approval for d (at most MaxGrant): until it
// ends, the same call (principal, tool, arguments) runs each time it is
// sent, without asking.
func (s *Store) Grant(id string, d time.Duration, by string) (Record, error) {
	if d <= 0 || d > MaxGrant {
		return Record{}, fmt.Errorf("approvals: a grant lasts more than 0 and at most %s, not %s", MaxGrant, d)
	}
	return s.decide(id, decision{Approve: true, By: by, At: s.now().UTC(), Until: s.now().Add(d).UTC()})
}

// Revoke ends a live grant now.
func (s *Store) Revoke(id, by string) (Record, error) {
	r, err := s.Get(id)
	if err != nil {
		return r, err
	}
	if r.Grant == nil || !r.Grant.Live {
		return r, fmt.Errorf("%s: %w (status %s)", id, ErrNotGrant, r.Status)
	}
	b, _ := json.Marshal(revocation{By: by, At: s.now().UTC()})
	if err := writeExclusive(s.path(id, ".revoked"), b); err != nil && !errors.Is(err, fs.ErrExist) {
		return r, fmt.Errorf("approvals: %w", err)
	}
	return s.Get(id)
}

// writeExclusive creates name with b, durably, failing if it exists.
func writeExclusive(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	return errors.Join(werr, f.Sync(), f.Close())
}

// Claim takes an approved approval to run it: true for exactly one caller
// ever, and only before it expires (ErrExpired after).
func (s *Store) Claim(id string) (bool, error) {
	r, err := s.Get(id)
	if err != nil {
		return false, err
	}
	switch r.Status {
	case mcpwire.ApprovalExpired:
		return false, fmt.Errorf("%s: %w at %s", id, ErrExpired, r.ExpiresAt.Format(time.RFC3339))
	case mcpwire.ApprovalApproved:
	default:
		return false, fmt.Errorf("approvals: %s is %s, not approved", id, r.Status)
	}
	f, err := os.OpenFile(s.path(id, ".claim"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("approvals: %w", err)
	}
	return true, f.Close()
}

// Claimed reports whether the approval was taken to run.
func (s *Store) Claimed(id string) bool {
	_, err := os.Stat(s.path(id, ".claim"))
	return err == nil
}

// SetJob records the job an approved command runs as.
func (s *Store) SetJob(id, job string) error {
	return atomicfs.WriteFile(s.path(id, ".job"), []byte(job+"\n"), 0o600)
}

// NotifierFile, in the store's directory, says the operator is told of
// each new pending approval (mcpctl unit install writes it when
// approvals.notify is configured, and removes it when not): the backend's
// NEEDS_APPROVAL then says the operator has been notified.
const NotifierFile = ".notifier"

// SetNotifier writes NotifierFile naming what notifies (a command), or
// removes it when what is empty.
func (s *Store) SetNotifier(what string) error {
	p := filepath.Join(s.dir, NotifierFile)
	if what == "" {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("approvals: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	b, _ := json.Marshal(struct {
		Command string `json:"command"`
	}{what})
	if err := atomicfs.WriteFile(p, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	return nil
}

// Notified reports whether a notifier is configured (NotifierFile).
func (s *Store) Notified() bool {
	_, err := os.Stat(filepath.Join(s.dir, NotifierFile))
	return err == nil
}

// Remove deletes an approval and its files.
func (s *Store) Remove(id string) {
	for _, ext := range []string{".json", ".decision", ".claim", ".job", ".revoked"} {
		_ = os.Remove(s.path(id, ext))
	}
}
