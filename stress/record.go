package stress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
)

// Identity is how the stress learns which build the target serves
// (verify.Client's system.info).
type Identity interface {
	SystemInfo(ctx context.Context, baseURL string) (version, build string, err error)
}

// premises are the checks whose SKIP means the run did not show what a
// cutover relies on: the offered shell load went above the limit, and the
// unit running the build was watched. A run that skipped any of them is
// recorded, but never as a pass.
func premises() []string {
	return []string{"shell.reaches.limit", "unit.stable", "unit.memory"}
}

// skippedPremises names the premise checks rep skipped.
func skippedPremises(rep *Report) []string {
	var out []string
	for _, ch := range rep.Checks {
		if ch.Status == Skip && slices.Contains(premises(), ch.Name) {
			out = append(out, ch.Name)
		}
	}
	return out
}

// RecordVerdict records rep's verdict in dir for the build that was
// stressed: the digest of the executable the unit runs, and only when the
// target itself reports that build in system.info's backend.build (the
// unit and the target could be different processes). Without a unit there
// is no build to name: nothing is recorded, and the report says so. A run
// that skipped a premise check is recorded as not passing. rep.Build says
// what was recorded, or why not.
func RecordVerdict(ctx context.Context, dir state.Dir, rep *Report, who Identity) error {
	b := &Build{}
	rep.Build = b
	if rep.UnitSamples == nil || rep.UnitSamples.First.MainPID == 0 {
		b.Note = "no unit sampled, so no build digest to record the verdict for"
		return nil
	}
	digest, err := ExeDigest(rep.UnitSamples.Last.MainPID)
	if err != nil {
		b.Note = err.Error()
		return err
	}
	b.Digest = digest
	ictx, cancel := context.WithTimeout(ctx, verify.ProbeTimeout)
	version, served, err := who.SystemInfo(ictx, rep.Target)
	cancel()
	if err != nil {
		b.Note = fmt.Sprintf("the target's system.info did not answer, so the stressed build is unproven: %v", err)
		return errors.New(b.Note)
	}
	if served != digest {
		b.Note = fmt.Sprintf("the target %s serves build %q, but unit %s runs %s: the verdict would name a build that was not stressed", rep.Target, served, rep.Unit, digest)
		return errors.New(b.Note)
	}
	b.Version = version
	pass := rep.Pass
	summary := fmt.Sprintf("profile %s, %s at %.0f/s offered, %d requests: ", rep.Profile, rep.Plan.Duration, rep.OfferedRate, rep.Requests)
	var failed []string
	for _, ch := range rep.Checks {
		if ch.Status == Fail {
			failed = append(failed, ch.Name)
		}
	}
	skipped := skippedPremises(rep)
	switch {
	case len(failed) > 0:
		summary += "FAIL " + strings.Join(failed, ", ")
	case len(skipped) > 0:
		pass = false
		summary += "INCONCLUSIVE, skipped " + strings.Join(skipped, ", ")
		b.Note = fmt.Sprintf("recorded as NOT passing: the run skipped %s, so it does not count for a cutover (offer more load, sample the unit)", strings.Join(skipped, ", "))
	default:
		summary += "all checks passed"
	}
	if rep.Faults {
		summary += " (with faults)"
	}
	if err := dir.RecordVerdict(state.Verdict{
		Kind: state.KindStress, Digest: digest, Version: version, Pass: pass, Summary: summary,
	}); err != nil {
		b.Note = err.Error()
		return err
	}
	b.Recorded = true
	return nil
}
