// Package outcome is mcpctl's contract with the scripts and the fleet that
// run it: the exit codes, the error that carries one, the JSON object a
// failure ends stderr with, and the JSON reports of a cutover and a
// rollback. It holds types only (no behaviour), so
// ops/deploy, which produces them, and ops/fleet, which reads a host's
// report back, share one definition.
package outcome

import (
	"errors"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/ops/lockfile"
)

// Exit codes of mcpctl. Scripts branch on them: keep them exactly.
const (
	OK             = 0
	Failed         = 1 // the operation failed and production is as it was
	Usage          = 2 // usage or config error, found before anything changed
	RolledBack     = 3 // cutover failed verification and the rollback completed
	RollbackFailed = 4 // rollback (or an install's undo) failed: a human is needed
)

// Error is a failure with the exit code it maps to. It is urfave/cli's
// ExitCoder, so the app hands the code on without reading its message.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the code mcpctl exits with.
func (e *Error) ExitCode() int { return e.Code }

// With marks err with code; nil stays nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// CodeOf is the exit code of err: OK for nil, the code of an *Error in its
// chain, else Failed.
func CodeOf(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Failed
}

// Failure is a failure as --json writes it, the last line of stderr: one
// object, so a script reads stdout's document and stderr's error alike.
type Failure struct {
	Error struct {
		Message     string `json:"message"`
		ExitCode    int    `json:"exitCode"`
		Next        string `json:"next,omitempty"`
		HumanNeeded string `json:"humanNeeded,omitempty"`
		// LockHeld: the command gave up waiting for a lock another command
		// held (--lock-wait); the fleet retries such a step later.
		LockHeld *LockHeld `json:"lockHeld,omitempty"`
	} `json:"error"`
}

// LockHeld names the lock a command gave up on and its holder (null when
// the holder did not say who it is).
type LockHeld struct {
	Path   string           `json:"path"`
	Holder *lockfile.Holder `json:"holder"`
}

// Cutover is what `mcpctl cutover --json` prints: what a cutover did.
type Cutover struct {
	// OK is the verdict: the cutover completed and verified (exit 0).
	OK          bool     `json:"ok"`
	FromVersion string   `json:"fromVersion"`
	ToVersion   string   `json:"toVersion"`
	Digest      string   `json:"digest,omitempty"`
	SnapshotID  string   `json:"snapshotId,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
	Refusals    []string `json:"refusals,omitempty"`
	Failures    []string `json:"failures,omitempty"`
	RolledBack  bool     `json:"rolledBack"`
	// FiredAtDeadline: verified, but the armed timer had fired; its run was
	// made a no-op (marker cleared under the lock) and the cutover stands.
	FiredAtDeadline bool      `json:"firedAtDeadline,omitempty"`
	Rollback        *Rollback `json:"rollback,omitempty"`
	Timings         []Timing  `json:"timings"`
	// Pruned is what the confirmed cutover pruned beyond install.keepReleases.
	Pruned *Pruned `json:"pruned,omitempty"`
	// Jobs says how many backend jobs ran before and still run after.
	Jobs *Jobs `json:"jobs,omitempty"`
	// Takeover names the production slot the cutover started and the unit
	// it took over from.
	Takeover *Takeover `json:"takeover,omitempty"`
	// Duration is last: its ...Ms field has always closed the object.
	Duration millis.Duration `json:"durationMs"`
}

// Rollback is what `mcpctl rollback --json` prints: what a rollback did.
type Rollback struct {
	// OK is the verdict: the rollback (or its no-op) completed (exit 0).
	OK         bool     `json:"ok"`
	Noop       bool     `json:"noop"`
	Reason     string   `json:"reason"`
	SnapshotID string   `json:"snapshotId,omitempty"`
	Version    string   `json:"version,omitempty"`
	Changes    []Change `json:"changes,omitempty"`
	Restarted  bool     `json:"restarted"`
	// Takeover names the slot that serves the restored release.
	Takeover *Takeover `json:"takeover,omitempty"`
	Timings  []Timing  `json:"timings,omitempty"`
	// Duration is last: its ...Ms field has always closed the object.
	Duration millis.Duration `json:"durationMs"`
}

// Change is what a restore did to one path (or found already right).
type Change struct {
	Path   string `json:"path"`
	Action string `json:"action"`
}

// Timing is one measured step of a cutover or rollback.
type Timing struct {
	Step     string          `json:"step"`
	Duration millis.Duration `json:"durationMs"`
}

// Pruned lists the snapshots and releases a confirmed cutover removed.
type Pruned struct {
	Snapshots []string `json:"snapshots,omitempty"`
	Releases  []string `json:"releases,omitempty"`
	Err       string   `json:"error,omitempty"`
}

// Jobs says what a cutover (or rollback) did to the running jobs: none may
// be stopped by it. StillRunning counts the jobs running before that run on
// in the same invocation; Ended names those that ended meanwhile (on their
// own, or cancelled: a deploy never stops one).
type Jobs struct {
	RunningBefore int      `json:"runningBefore"`
	StillRunning  int      `json:"stillRunning"`
	Ended         []string `json:"ended,omitempty"`
	Err           string   `json:"error,omitempty"`
}

// Takeover is what starting a production slot did, for the report.
type Takeover struct {
	Slot    string `json:"slot"`
	Unit    string `json:"unit"`
	Standby string `json:"standby,omitempty"`
	// From is the unit that served before ("" when none did).
	From string `json:"from,omitempty"`
	// Resumed says Unit was parked and accepts again: nothing started.
	Resumed bool `json:"resumed,omitempty"`
	// Parked are the units that handed off and wait, able to take over
	// again at once, until the cutover is confirmed (then stopped).
	Parked []string `json:"parked,omitempty"`
	// Warnings name the old slots that exited in the handoff instead of
	// parking: their calls may have been cut (the report's warnings).
	Warnings []string `json:"-"`
}
