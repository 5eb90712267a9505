package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/ops/lockfile"
)

// Event types of the run log (and of `--json` output).
const (
	EvRunStart    = "run-start"
	EvWaveStart   = "wave-start"
	EvStepStart   = "step-start"
	EvStepEnd     = "step-end"
	EvHostEnd     = "host-end"
	EvWaveEnd     = "wave-end"
	EvRevertStart = "revert-start"
	EvRevertHost  = "revert-host"
	EvRunEnd      = "run-end"
)

// Event is one line of the run log: append-only, one per step of a run, so
// that a resumed run (or a person) knows what was started and what ended.
type Event struct {
	Time time.Time `json:"time"`
	Run  string    `json:"run"`
	Type string    `json:"type"`
	Wave int       `json:"wave,omitempty"`
	Host string    `json:"host,omitempty"`
	// Step is the remote step (upload, canary, stress, canary-stop,
	// cutover, rollback) and StepID its id on the host.
	Step   string `json:"step,omitempty"`
	StepID string `json:"stepId,omitempty"`
	// ExitCode of the host's mcpctl for the step; nil when unknown.
	ExitCode *int `json:"exitCode,omitempty"`
	// HostStart and HostEnd are the step's times by the host's clock.
	HostStart time.Time `json:"hostStart,omitzero"`
	HostEnd   time.Time `json:"hostEnd,omitzero"`
	Outcome   Outcome   `json:"outcome,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	// From and Snapshot: the version a cutover left and the snapshot it
	// took there (what a revert restores).
	From     string `json:"from,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// run-start: the build and the plan.
	Build   string   `json:"build,omitempty"`
	Digest  string   `json:"digest,omitempty"`
	Version string   `json:"version,omitempty"`
	Waves   []Wave   `json:"waves,omitempty"`
	Policy  *Rollout `json:"policy,omitempty"`
	// Decision after a wave; Code at run-end.
	Decision Decision `json:"decision,omitempty"`
	Code     *int     `json:"code,omitempty"`
}

// RunLog is the append-only log of fleet runs beside the inventory.
type RunLog struct {
	Path string
	mu   sync.Mutex
}

// Append writes e as one line, durably, before the step it announces runs.
func (l *RunLog) Append(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("run log: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := atomicfs.AppendLine(l.Path, b, 0o644); err != nil {
		return fmt.Errorf("run log: %w", err)
	}
	return nil
}

// Read returns every event; a torn last line (a writer killed mid-write)
// is skipped, any other unreadable line is an error.
func (l *RunLog) Read() ([]Event, error) {
	var (
		out []Event
		bad error
	)
	err := atomicfs.ReadLines(l.Path, 4<<20, func(n int, line []byte) error {
		if bad != nil {
			return bad
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			bad = fmt.Errorf("run log %s line %d: %w", l.Path, n, err)
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run log: %w", err)
	}
	return out, nil
}

// HostRecord is what a run's log says about one host.
type HostRecord struct {
	Wave     int     `json:"wave"`
	Outcome  Outcome `json:"outcome,omitempty"`
	From     string  `json:"from,omitempty"`
	Snapshot string  `json:"snapshot,omitempty"`
	// Open is the step started and never ended in the log (the controller
	// died meanwhile): its outcome is on the host.
	Open *Event `json:"open,omitempty"`
	// Steps counts the steps started, for fresh step ids on a retry.
	Steps int `json:"steps"`
}

// RunState is one run replayed from its log.
type RunState struct {
	Start  Event                  `json:"start"`
	Hosts  map[string]*HostRecord `json:"hosts"`
	Waves  map[int]Decision       `json:"waves"` // decisions taken
	End    *Event                 `json:"end,omitempty"`
	Revert bool                   `json:"revert"` // a revert started
}

// Code is the run's exit code, -1 while it has not ended.
func (rs *RunState) Code() int {
	if rs.End == nil || rs.End.Code == nil {
		return -1
	}
	return *rs.End.Code
}

// LastRun replays the newest run in events; nil when there is none.
func LastRun(events []Event) *RunState {
	var rs *RunState
	for _, e := range events {
		if e.Type == EvRunStart {
			rs = &RunState{Start: e, Hosts: map[string]*HostRecord{}, Waves: map[int]Decision{}}
			for _, w := range e.Waves {
				for _, h := range w.Hosts {
					rs.Hosts[h] = &HostRecord{Wave: w.Index}
				}
			}
			continue
		}
		if rs == nil || e.Run != rs.Start.Run {
			continue
		}
		h := rs.Hosts[e.Host]
		switch e.Type {
		case EvStepStart:
			if h != nil {
				ev := e
				h.Open = &ev
				h.Steps++
			}
		case EvStepEnd:
			// A step that ended without an outcome (the host became
			// unreachable) stays open: its outcome is on the host, and a
			// resumed run reads it from there.
			if h != nil && h.Open != nil && h.Open.StepID == e.StepID && (e.ExitCode != nil || e.Detail == StepAbsent) {
				h.Open = nil
			}
			if h != nil && e.Step == "cutover" && e.Snapshot != "" {
				h.Snapshot, h.From = e.Snapshot, e.From
			}
		case EvHostEnd:
			if h != nil {
				h.Outcome = e.Outcome
				if e.Snapshot != "" {
					h.Snapshot, h.From = e.Snapshot, e.From
				}
			}
		case EvWaveEnd:
			rs.Waves[e.Wave] = e.Decision
		case EvRevertStart:
			rs.Revert = true
		case EvRevertHost:
			if h != nil && e.Outcome == Reverted {
				h.Outcome = Reverted
			}
		case EvRunEnd:
			ev := e
			rs.End = &ev
		}
	}
	return rs
}

// Lock is the one fleet run at a time: mcpctl's one lock (ops/lockfile)
// on a file beside the run log, so it vanishes with the process holding it
// (a SIGKILLed controller leaves no stale lock).
type Lock struct{ l *lockfile.Lock }

// ErrFleetLocked: another fleet command holds the lock.
var ErrFleetLocked = errors.New("another mcpctl fleet run holds the lock")

// TakeLock takes the lock at path, waiting up to wait while another fleet
// command holds it; waiting (when set) is told the holder once.
func TakeLock(ctx context.Context, path, owner string, wait time.Duration, waiting func(*lockfile.Holder)) (*Lock, error) {
	l, err := lockfile.Take(ctx, path, owner, lockfile.Options{Wait: wait, Waiting: waiting})
	var le *lockfile.LockedError
	switch {
	case errors.As(err, &le) && le.Holder != nil:
		return nil, fmt.Errorf("%w (%s: %s)", ErrFleetLocked, path, le.Holder)
	case errors.As(err, &le):
		return nil, fmt.Errorf("%w (%s)", ErrFleetLocked, path)
	case err != nil:
		return nil, fmt.Errorf("fleet lock: %w", err)
	}
	return &Lock{l: l}, nil
}

// Release drops the lock; safe to call twice.
func (l *Lock) Release() {
	if l != nil {
		_ = l.l.Release()
	}
}
