package state

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// ErrStaleNonce: the nonce a rollback was started with does not name the
// pending cutover (already confirmed, rolled back, or superseded).
var ErrStaleNonce = errors.New("stale nonce: no pending cutover with that nonce")

// Pending is the pending-cutover marker. It outlives a reboot, unlike the
// transient rollback timer, so the boot-time check can roll back a cutover
// that was never confirmed.
type Pending struct {
	SnapshotID  string    `json:"snapshotId"`
	Nonce       string    `json:"nonce"`
	FromVersion string    `json:"fromVersion"`
	ToVersion   string    `json:"toVersion"`
	ArmedAt     time.Time `json:"armedAt"`
	Deadline    time.Time `json:"deadline"`
	TimerUnit   string    `json:"timerUnit"`
	ServiceUnit string    `json:"serviceUnit"`
}

// NewNonce returns 16 random bytes in hex.
func NewNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Validate checks the fields a rollback depends on.
func (p *Pending) Validate() error {
	switch {
	case p.SnapshotID == "":
		return errors.New("pending cutover: snapshotId must not be empty")
	case len(p.Nonce) < 16:
		return fmt.Errorf("pending cutover: nonce %q: want at least 16 hex characters (use NewNonce)", p.Nonce)
	case p.Deadline.IsZero():
		return errors.New("pending cutover: deadline must be set")
	}
	return nil
}

// Matches reports whether nonce names this marker (constant time; an empty
// nonce never matches).
func (p *Pending) Matches(nonce string) bool {
	return p != nil && nonce != "" && subtle.ConstantTimeCompare([]byte(p.Nonce), []byte(nonce)) == 1
}

// Remaining is the time left until the deadline at now (negative once past).
func (p *Pending) Remaining(now time.Time) time.Duration { return p.Deadline.Sub(now) }

// WritePending replaces the marker atomically.
func (d Dir) WritePending(p *Pending) error {
	stateDir := string(d)
	if err := p.Validate(); err != nil {
		return err
	}
	return writeJSON(stateDir, PendingFile, p)
}

// ReadPending returns the marker, or (nil, nil) when none is pending.
func (d Dir) ReadPending() (*Pending, error) {
	stateDir := string(d)
	var p Pending
	found, err := readJSON(stateDir, PendingFile, &p)
	if err != nil || !found {
		return nil, err
	}
	return &p, nil
}

// ClearPending removes the marker; an absent marker is fine.
func (d Dir) ClearPending() error {
	stateDir := string(d)
	return atomicfs.Remove(filepath.Join(stateDir, PendingFile))
}

// CheckNonce returns the marker if nonce names it, else ErrStaleNonce (also
// when nothing is pending).
func (d Dir) CheckNonce(nonce string) (*Pending, error) {
	p, err := d.ReadPending()
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("%w (nothing is pending)", ErrStaleNonce)
	}
	if !p.Matches(nonce) {
		return nil, fmt.Errorf("%w (pending cutover %s -> %s has another nonce)", ErrStaleNonce, p.FromVersion, p.ToVersion)
	}
	return p, nil
}

// ClearPendingIf removes the marker only if nonce names it, so that a late
// rollback or disarm of an old cutover cannot clear a newer one. The caller
// holds the lock, which makes check-then-remove safe.
func (d Dir) ClearPendingIf(nonce string) error {
	if _, err := d.CheckNonce(nonce); err != nil {
		return err
	}
	return d.ClearPending()
}
