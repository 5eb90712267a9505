// The cutover's decisions are pure functions of observed facts
// (PlanPreflight, Judge, PlanRollback), tested as tables; Cutover and
// Rollback gather the facts and apply the plans.

package deploy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/state"
)

// TunnelFact is one tunnel as observed before or after the restart.
type TunnelFact struct {
	Name         string
	Unit         string
	ActiveState  string
	InvocationID string
	// ReadyErr is the tunnel URL's /readyz probe; ShellErr a shell.exec through
	// the tunnel (after the restart only).
	ReadyErr error
	ShellErr error
}

// Facts is what preflight observed before anything changed.
type Facts struct {
	ArmRollback      bool
	SkipCanaryReason string
	// CandidateErr: the candidate failed the canary checks (version, config).
	CandidateErr     error
	CandidateVersion string
	Digest           string
	// ReleaseDigest is the digest of a release already installed under
	// CandidateVersion ("" when none).
	ReleaseDigest string
	CanaryOK      bool
	StressOK      bool
	// Production.
	BackendActive string // ActiveState of the backend unit
	HealthzErr    error
	ReadyzErr     error
	Tunnels       []TunnelFact
	// Socket is production's socket unit (not loaded on an installation
	// older than it).
	Socket *SocketFact
	// Duplicates lists other supervisors of production found (a foreign
	// listener on the port, a second unit with the same ExecStart, ...).
	Duplicates []string
	// Supervision is every loaded service, for DuplicateSupervisors (nil:
	// not observed).
	Supervision *Supervision
	// Pending is a cutover that was never confirmed.
	Pending *state.Pending
	// CurrentVersion is what current points to now.
	CurrentVersion string
}

// Preflight is the decision of PlanPreflight.
type Preflight struct {
	// Usage is set when the command must refuse as a usage error (exit 2).
	Usage string
	// Refusals are the reasons the cutover must not start (exit 1).
	Refusals []string
	// Warnings are accepted risks the operator asked for (skipped checks).
	Warnings []string
}

// OK reports whether the cutover may proceed.
func (p Preflight) OK() bool { return p.Usage == "" && len(p.Refusals) == 0 }

// PlanPreflight decides whether a cutover may start.
func PlanPreflight(f Facts) Preflight {
	var p Preflight
	if !f.ArmRollback {
		p.Usage = "cutover requires --arm-rollback: the rollback must be armed before production restarts, so a bad deploy undoes itself even if this session dies"
		return p
	}
	refuse := func(format string, a ...any) { p.Refusals = append(p.Refusals, fmt.Sprintf(format, a...)) }
	if f.CandidateErr != nil {
		refuse("candidate: %v", f.CandidateErr)
	}
	if f.ReleaseDigest != "" && f.Digest != "" && f.ReleaseDigest != f.Digest {
		refuse("release %s is already installed with build %s, not this build %s: a version names one build; rebuild with a new version stamp", f.CandidateVersion, f.ReleaseDigest, f.Digest)
	}
	if f.Pending != nil {
		refuse("a cutover to %s (snapshot %s) is still pending: confirm it finishes or run `mcpctl rollback --last`", f.Pending.ToVersion, f.Pending.SnapshotID)
	}
	if f.CandidateVersion != "" && f.CandidateVersion == f.CurrentVersion {
		refuse("version %s is already current: build the candidate with a new version stamp", f.CandidateVersion)
	}
	if strings.TrimSpace(f.SkipCanaryReason) != "" {
		p.Warnings = append(p.Warnings, "canary and stress checks skipped: "+f.SkipCanaryReason)
	} else {
		if !f.CanaryOK {
			refuse("no passing canary on record for %s: run `mcpctl canary start` or pass --skip-canary-check REASON", f.Digest)
		}
		if !f.StressOK {
			refuse("no passing stress run on record for %s: run `mcpctl stress` or pass --skip-canary-check REASON", f.Digest)
		}
	}
	switch {
	case f.BackendActive == "failed":
		// systemd gave up on it (a crash loop): a cutover starts from a
		// production that serves.
		refuse("production backend is %q, not active: run `mcpctl recover` first (the watchdog also retries by itself)", f.BackendActive)
	case f.BackendActive != "active":
		refuse("production backend is %q, not active", f.BackendActive)
	}
	if f.HealthzErr != nil {
		refuse("production /healthz: %v", f.HealthzErr)
	}
	if f.ReadyzErr != nil {
		refuse("production /readyz: %v", f.ReadyzErr)
	}
	switch s := f.Socket; {
	case s == nil:
	case s.Err != nil:
		refuse("socket %s is %s", s.Unit, s)
	case s.Loaded() && !s.Active():
		// Written by `mcpctl unit install` while the old service holds the
		// port, or failed: the restart starts it, but until the new build
		// listens callers are refused, as without a socket.
		p.Warnings = append(p.Warnings, fmt.Sprintf("socket %s is %s, not listening: the restart starts it; until then connections are refused", s.Unit, s.ActiveState))
	}
	if len(f.Tunnels) == 0 {
		refuse("no tunnels configured: cutover verifies both tunnels")
	}
	for _, t := range f.Tunnels {
		if t.ActiveState != "active" {
			refuse("tunnel %s (%s) is %q, not active", t.Name, t.Unit, t.ActiveState)
		}
		if t.ReadyErr != nil {
			refuse("tunnel %s: %v", t.Name, t.ReadyErr)
		}
	}
	dups := f.Duplicates
	if f.Supervision != nil {
		dups = append(slices.Clip(dups), DuplicateSupervisors(*f.Supervision)...)
	}
	for _, d := range dups {
		refuse("duplicate supervisor: %s", d)
	}
	return p
}

// Expect is what production must report after the restart.
type Expect struct {
	Version string
	Digest  string
	// Socket is production's socket unit before the restart: when it was
	// listening, the restart must have left it alone (same run).
	Socket *SocketFact
}

// Observed is production after the restart.
type Observed struct {
	Version    string // system.info backend.version
	Digest     string // system.info backend.build
	InfoErr    error
	HealthzErr error
	ReadyzErr  error
	ShellErr   error
	// FileListErr is a file.list of "/" (nil when not probed).
	FileListErr error
	Tunnels     []TunnelFact
	// Socket is production's socket unit (nil when not observed).
	Socket *SocketFact
}

// Judge lists every way the restarted production fails verification; empty
// means verified. before are the tunnels as seen in preflight: a tunnel must
// not have been restarted (same InvocationID).
func Judge(want Expect, before []TunnelFact, got Observed) []string {
	var fails []string
	fail := func(format string, a ...any) { fails = append(fails, fmt.Sprintf(format, a...)) }
	if got.InfoErr != nil {
		fail("system.info: %v", got.InfoErr)
	} else {
		if got.Version != want.Version {
			fail("backend reports version %q, want %q", got.Version, want.Version)
		}
		if want.Digest != "" && got.Digest != want.Digest {
			fail("backend reports build %q, want %q", got.Digest, want.Digest)
		}
	}
	if got.HealthzErr != nil {
		fail("backend /healthz: %v", got.HealthzErr)
	}
	if got.ReadyzErr != nil {
		fail("backend /readyz: %v", got.ReadyzErr)
	}
	if got.ShellErr != nil {
		fail("backend shell.exec: %v", got.ShellErr)
	}
	if got.FileListErr != nil {
		fail("backend file.list: %v", got.FileListErr)
	}
	switch b, a := want.Socket, got.Socket; {
	case b.Active() && !b.Same(a):
		fail("socket %s: %v (was %s, now %s)", b.Unit, errSocketRestarted, b, a)
	case a != nil && (a.Err != nil || (a.Loaded() && !a.Active())):
		fail("socket %s is %s, not active", a.Unit, a)
	}
	after := make(map[string]TunnelFact, len(got.Tunnels))
	for _, t := range got.Tunnels {
		after[t.Name] = t
	}
	for _, b := range before {
		a, ok := after[b.Name]
		switch {
		case !ok:
			fail("tunnel %s was not observed", b.Name)
			continue
		case a.ActiveState != "active":
			fail("tunnel %s (%s) is %q, not active", b.Name, b.Unit, a.ActiveState)
		case a.InvocationID != b.InvocationID:
			fail("tunnel %s (%s) was restarted (InvocationID %s, was %s)", b.Name, b.Unit, a.InvocationID, b.InvocationID)
		}
		if a.ReadyErr != nil {
			fail("tunnel %s /readyz: %v", b.Name, a.ReadyErr)
		}
		if a.ShellErr != nil {
			fail("tunnel %s shell.exec: %v", b.Name, a.ShellErr)
		}
	}
	return fails
}

// RollbackFacts is what a rollback observed before acting.
type RollbackFacts struct {
	SnapshotID string // --snapshot
	Nonce      string // --nonce
	IfPending  bool   // --if-pending
	Pending    *state.Pending
	// Newest is the newest snapshot id, used when neither --snapshot nor a
	// pending marker names one.
	Newest string
}

// RollbackPlan is the decision of PlanRollback.
type RollbackPlan struct {
	// Act is false for a no-op; Reason says why either way.
	Act        bool
	Reason     string
	SnapshotID string
	// Nonce of the pending marker to clear after the restore ("" clears none).
	Nonce string
}

// PlanRollback decides whether and to what a rollback restores.
func PlanRollback(f RollbackFacts) RollbackPlan {
	p := f.Pending
	switch {
	case f.Nonce != "" && (p == nil || !p.Matches(f.Nonce)):
		return RollbackPlan{Reason: "stale nonce: the cutover it was armed for was already confirmed or rolled back; nothing to do"}
	case f.IfPending && p == nil:
		return RollbackPlan{Reason: "no cutover pending; nothing to do"}
	}
	var plan RollbackPlan
	if p != nil {
		plan.Nonce = p.Nonce
	}
	switch {
	case f.SnapshotID != "":
		if p != nil && f.SnapshotID != p.SnapshotID && f.Nonce == "" {
			// An explicit older snapshot while a cutover is pending: still
			// honour the operator, and clear the marker since the state it
			// guarded is replaced.
			plan.Reason = fmt.Sprintf("restoring snapshot %s named by --snapshot (pending cutover expected %s)", f.SnapshotID, p.SnapshotID)
		} else {
			plan.Reason = "restoring snapshot " + f.SnapshotID
		}
		plan.SnapshotID = f.SnapshotID
	case p != nil:
		plan.SnapshotID = p.SnapshotID
		plan.Reason = fmt.Sprintf("restoring snapshot %s of the pending cutover %s -> %s", p.SnapshotID, p.FromVersion, p.ToVersion)
	case f.Newest != "":
		plan.SnapshotID = f.Newest
		plan.Reason = "restoring the newest snapshot " + f.Newest
	default:
		return RollbackPlan{Reason: "no snapshot to restore: none pending, none named, none kept"}
	}
	plan.Act = true
	return plan
}

// Timing is one measured step of a cutover or rollback.
type Timing = outcome.Timing
