// Package lockfile is mcpctl's one inter-process lock: flock(2) on a file
// that also holds a JSON record of who holds it. The lock belongs to the
// open descriptor, so it vanishes with its process (a SIGKILLed holder
// leaves no stale lock). A taker may wait for it, bounded, and may announce
// that it wants it through a second, shared flock (the intent file), so that
// a short background holder (the watchdog) steps aside instead of competing.
// Both the host's state-dir lock and the fleet's run lock are this lock.
package lockfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
	// Seq counts the takes of this lock; a release keeps it (with pid 0) so
	// the next taker continues the count. A reader that saw Seq n before some
	// work and takes the lock as n+1 knows nobody held it in between.
	Seq uint64 `json:"seq,omitempty"`
}

// String names the holder for messages.
func (h *Holder) String() string {
	return fmt.Sprintf("pid %d (%s) since %s", h.PID, h.Owner, h.Since.Format(time.RFC3339))
}

// LockedError is ErrLocked with the holder, when the lock file names one.
type LockedError struct {
	Path   string
	Holder *Holder       // nil when the record could not be read or parsed
	Waited time.Duration // how long the taker waited before giving up
}

func (e *LockedError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("%v (lock %s held by a process that did not say who it is)", ErrLocked, e.Path)
	}
	s := fmt.Sprintf("%v: %s holds %s", ErrLocked, e.Holder, e.Path)
	if e.Waited > 0 {
		return s + fmt.Sprintf("; still held after waiting %s", e.Waited.Round(time.Millisecond))
	}
	return s + "; wait for it to finish"
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Options say how Take waits.
type Options struct {
	// Wait is the longest Take waits for a held lock; zero tries once.
	Wait time.Duration
	// Waiting is called once, with the holder (nil when unknown), when Take
	// finds the lock held and is going to wait.
	Waiting func(*Holder)
	// Intent, when set, is a file Take holds a shared flock on from before
	// its first try until Release: Wanted(Intent) then tells a background
	// holder that a command waits for the lock or holds it.
	Intent string
	// Poll is the interval between tries; DefaultPoll when zero.
	Poll time.Duration
}

// DefaultPoll is how often a waiting Take retries.
const DefaultPoll = 100 * time.Millisecond

// Lock is a taken lock.
type Lock struct {
	path   string
	f      *os.File
	intent *os.File
	seq    uint64
	once   sync.Once
	err    error
}

// Take takes the lock at path for owner, waiting up to o.Wait while another
// process holds it. On contention the error is a *LockedError (errors.Is
// ErrLocked) naming the holder. The descriptors are close-on-exec, so
// children never inherit the lock.
func Take(ctx context.Context, path, owner string, o Options) (*Lock, error) {
	poll := o.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	l := &Lock{path: path}
	if o.Intent != "" {
		// Best effort: the intent only makes a background holder step aside;
		// it never holds anyone up (a tester holds it exclusively for an
		// instant, hence the retries).
		if f, err := os.OpenFile(o.Intent, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
			deadline := time.Now().Add(time.Second)
			for {
				if flock(f, syscall.LOCK_SH|syscall.LOCK_NB) == nil {
					l.intent = f
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					f.Close()
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	// No O_TRUNC: the holder's record must survive a contender opening it.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		l.dropIntent()
		return nil, fmt.Errorf("lock: %w", err)
	}
	start := time.Now()
	told := false
	for {
		err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			l.dropIntent()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		waited := time.Since(start)
		if waited >= o.Wait || ctx.Err() != nil {
			f.Close()
			l.dropIntent()
			return nil, &LockedError{Path: path, Holder: ReadHolder(path), Waited: o.Wait}
		}
		if !told && o.Waiting != nil {
			told = true
			o.Waiting(ReadHolder(path))
		}
		t := time.NewTimer(min(poll, o.Wait-waited))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	l.seq = readRecord(path).Seq + 1
	h := Holder{PID: os.Getpid(), Owner: owner, Since: time.Now().UTC(), Seq: l.seq}
	if err := writeRecord(f, h); err != nil {
		flock(f, syscall.LOCK_UN)
		f.Close()
		l.dropIntent()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l.f = f
	return l, nil
}

// Seq is this take's sequence number (see Holder.Seq).
func (l *Lock) Seq() uint64 { return l.seq }

// Release drops the lock; safe to call more than once.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.once.Do(func() {
		// Clear the holder before unlocking so nobody reads a stale one; keep
		// the count.
		_ = writeRecord(l.f, Holder{Seq: l.seq})
		if err := flock(l.f, syscall.LOCK_UN); err != nil {
			l.err = fmt.Errorf("unlock %s: %w", l.path, err)
		}
		if err := l.f.Close(); err != nil && l.err == nil {
			l.err = fmt.Errorf("unlock %s: %w", l.path, err)
		}
		l.dropIntent()
	})
	return l.err
}

func (l *Lock) dropIntent() {
	if l.intent != nil {
		l.intent.Close()
		l.intent = nil
	}
}

// Wanted reports whether some Take with this intent file waits for its lock
// or holds it. It takes the intent file exclusively for an instant, never
// waiting; a missing file means nobody wants the lock.
func Wanted(intent string) bool {
	f, err := os.OpenFile(intent, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = flock(f, syscall.LOCK_UN)
	return false
}

// ReadHolder reports who holds the lock at path, for display, or nil when
// nobody does. It never probes the lock (a probe could make a concurrent
// Take fail); it trusts the record, which a clean release clears, and drops
// a record whose process is gone (SIGKILLed).
func ReadHolder(path string) *Holder {
	h := readRecord(path)
	if h.PID == 0 {
		return nil
	}
	if err := syscall.Kill(h.PID, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return &h
}

// ReadSeq is the lock's take count as its record says (0 when unreadable,
// or while a taker is writing it).
func ReadSeq(path string) uint64 { return readRecord(path).Seq }

func readRecord(path string) Holder {
	var h Holder
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &h) != nil {
		return Holder{}
	}
	return h
}

func writeRecord(f *os.File, h Holder) error {
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return err
	}
	return f.Sync()
}

// flock is flock(2), retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
