package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrLocked: another mcpctl command holds the lock.
var ErrLocked = errors.New("another mcpctl command is running")

// Holder is what the lock file says about who holds it.
type Holder struct {
	PID   int       `json:"pid"`
	Owner string    `json:"owner"` // the command, e.g. "cutover --build ..."
	Since time.Time `json:"since"`
}

// LockedError is ErrLocked with the holder, when the lock file names one.
type LockedError struct {
	Path   string
	Holder *Holder // nil when the file could not be read or parsed
}

func (e *LockedError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("%v (lock %s held by a process that did not say who it is)", ErrLocked, e.Path)
	}
	return fmt.Sprintf("%v: pid %d (%s) since %s holds %s; wait for it to finish",
		ErrLocked, e.Holder.PID, e.Holder.Owner, e.Holder.Since.Format(time.RFC3339), e.Path)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Lock takes the mcpctl lock, <stateDir>/lock, without waiting: flock(2) on
// an open file, so it belongs to this process and vanishes with it (a
// SIGKILLed mcpctl leaves no stale lock behind). The descriptor is
// close-on-exec, so children never inherit it. On contention the error is a
// *LockedError (errors.Is ErrLocked) naming the holder. release is safe to
// call more than once.
func (d Dir) Lock(owner string) (release func() error, err error) {
	stateDir := string(d)
	if err := ensureDir(stateDir); err != nil {
		return nil, err
	}
	path := filepath.Join(stateDir, LockFile)
	// No O_TRUNC: the holder's record must survive a contender opening it.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	h := Holder{PID: os.Getpid(), Owner: owner, Since: time.Now().UTC()}
	b, _ := json.Marshal(h)
	if err := writeHolder(f, append(b, '\n')); err != nil {
		flock(f, syscall.LOCK_UN)
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var once sync.Once
	var rerr error
	return func() error {
		once.Do(func() {
			// Clear the record before unlocking so nobody reads a stale holder.
			f.Truncate(0)
			if err := flock(f, syscall.LOCK_UN); err != nil {
				rerr = fmt.Errorf("unlock %s: %w", path, err)
			}
			if err := f.Close(); err != nil && rerr == nil {
				rerr = fmt.Errorf("unlock %s: %w", path, err)
			}
		})
		return rerr
	}, nil
}

// ReadHolder reports who holds the lock, for display (e.g. mcpctl status),
// or nil when nobody does. It does not probe the lock itself, since a probe
// would make a concurrent Lock fail; it trusts the record, which a clean
// release clears, and drops a record whose process is gone (SIGKILLed).
func (d Dir) ReadHolder() *Holder {
	stateDir := string(d)
	h := readHolder(filepath.Join(stateDir, LockFile))
	if h == nil {
		return nil
	}
	if err := syscall.Kill(h.PID, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return h
}

func writeHolder(f *os.File, b []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

func readHolder(path string) *Holder {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return nil
	}
	return &h
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// LockWait takes the lock like Lock, retrying up to wait while another
// command holds it.
func (d Dir) LockWait(ctx context.Context, owner string, wait time.Duration) (release func() error, err error) {
	deadline := time.Now().Add(wait)
	for {
		release, err := d.Lock(owner)
		if err == nil || !errors.Is(err, ErrLocked) || time.Now().After(deadline) {
			return release, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
