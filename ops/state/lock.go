package state

import (
	"context"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/ops/lockfile"
)

// ErrLocked: another mcpctl command holds the lock.
var ErrLocked = lockfile.ErrLocked

// Holder is what the lock file says about who holds it.
type Holder = lockfile.Holder

// LockedError is ErrLocked with the holder, when the lock file names one.
type LockedError = lockfile.LockedError

// DefaultLockWait is how long a mutating command waits for the lock by
// default: far longer than a watchdog round holds it, far shorter than a
// cutover.
const DefaultLockWait = 30 * time.Second

// Lock takes the mcpctl lock, <stateDir>/lock, without waiting: see
// LockWait. release is safe to call more than once.
func (d Dir) Lock(owner string) (release func() error, err error) {
	return d.LockWait(context.Background(), owner, 0, nil)
}

// LockWait takes the mcpctl lock for a mutating command, waiting up to wait
// while another command holds it; waiting, when set, is told the holder once
// when the wait starts. From its first try until release the command's
// intent is visible to Wanted, so the watchdog steps aside. The lock is
// flock(2) on an open file: it belongs to this process and vanishes with it
// (a SIGKILLed mcpctl leaves no stale lock behind). On contention past the
// wait the error is a *LockedError (errors.Is ErrLocked) naming the holder.
func (d Dir) LockWait(ctx context.Context, owner string, wait time.Duration, waiting func(*Holder)) (release func() error, err error) {
	if err := ensureDir(string(d)); err != nil {
		return nil, err
	}
	l, err := lockfile.Take(ctx, d.lockPath(), owner, lockfile.Options{
		Wait: wait, Waiting: waiting, Intent: filepath.Join(string(d), LockIntentFile),
	})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// TryLock takes the lock once for a background holder (the watchdog): it
// never waits and announces no intent. The caller compares the lock's Seq
// with a LockSeq read earlier to learn whether anyone held it in between.
func (d Dir) TryLock(owner string) (*lockfile.Lock, error) {
	if err := ensureDir(string(d)); err != nil {
		return nil, err
	}
	return lockfile.Take(context.Background(), d.lockPath(), owner, lockfile.Options{})
}

// Wanted reports whether a mutating command waits for the lock or holds it.
func (d Dir) Wanted() bool { return lockfile.Wanted(filepath.Join(string(d), LockIntentFile)) }

// LockSeq is how many times the lock has been taken (see Holder.Seq).
func (d Dir) LockSeq() uint64 { return lockfile.ReadSeq(d.lockPath()) }

// ReadHolder reports who holds the lock, for display (e.g. mcpctl status),
// or nil when nobody does. It does not probe the lock itself, since a probe
// could make a concurrent Lock fail; it trusts the record, which a clean
// release clears, and drops a record whose process is gone (SIGKILLed).
func (d Dir) ReadHolder() *Holder { return lockfile.ReadHolder(d.lockPath()) }

func (d Dir) lockPath() string { return filepath.Join(string(d), LockFile) }
