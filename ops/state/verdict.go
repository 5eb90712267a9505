package state

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// Verdict kinds.
const (
	KindCanary = "canary"
	KindStress = "stress"
)

// Verdict is the outcome of a canary or stress run against one build,
// identified by its digest: cutover requires passing ones for what it
// installs.
type Verdict struct {
	Kind    string    `json:"kind"`   // "canary" | "stress"
	Digest  string    `json:"digest"` // "sha256:<hex>" of the build
	Version string    `json:"version,omitempty"`
	Pass    bool      `json:"pass"`
	Time    time.Time `json:"time"`
	Summary string    `json:"summary,omitempty"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ValidateDigest accepts "sha256:" and 64 lowercase hex digits.
func ValidateDigest(d string) error {
	if !digestRE.MatchString(d) {
		return fmt.Errorf("digest %q: want sha256:<64 lowercase hex digits>", d)
	}
	return nil
}

func (v *Verdict) validate() error {
	if v.Kind != KindCanary && v.Kind != KindStress {
		return fmt.Errorf("verdict kind %q: want %q or %q", v.Kind, KindCanary, KindStress)
	}
	return ValidateDigest(v.Digest)
}

// RecordVerdict appends v to <stateDir>/verdicts.jsonl (a zero Time is now).
func (d Dir) RecordVerdict(v Verdict) error {
	stateDir := string(d)
	if err := v.validate(); err != nil {
		return fmt.Errorf("record verdict: %w", err)
	}
	if v.Time.IsZero() {
		v.Time = time.Now()
	}
	v.Time = v.Time.UTC()
	return appendJSON(stateDir, VerdictsFile, v)
}

// Verdicts returns every readable record, in file order. A line torn by a
// crash is skipped: it can only lose a record, which makes a cutover refuse,
// never pass.
func (d Dir) Verdicts() ([]Verdict, error) {
	var out []Verdict
	err := atomicfs.ReadLines(filepath.Join(string(d), VerdictsFile), 1<<20, func(_ int, line []byte) error {
		var v Verdict
		if json.Unmarshal(line, &v) == nil && v.validate() == nil {
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verdicts: %w", err)
	}
	return out, nil
}

// Latest returns the newest verdict of kind for digest, or nil. Newest is by
// Time; at equal times the later line wins.
func (d Dir) Latest(kind, digest string) (*Verdict, error) {
	all, err := d.Verdicts()
	if err != nil {
		return nil, err
	}
	var best *Verdict
	for i := range all {
		v := &all[i]
		if v.Kind == kind && v.Digest == digest && (best == nil || !v.Time.Before(best.Time)) {
			best = v
		}
	}
	return best, nil
}

// PassingFor reports whether the newest canary and the newest stress verdict
// for digest passed. A build without a record of a kind has not passed it.
func (d Dir) PassingFor(digest string) (canaryOK, stressOK bool, err error) {
	if err := ValidateDigest(digest); err != nil {
		return false, false, err
	}
	c, err := d.Latest(KindCanary, digest)
	if err != nil {
		return false, false, err
	}
	s, err := d.Latest(KindStress, digest)
	if err != nil {
		return false, false, err
	}
	return c != nil && c.Pass, s != nil && s.Pass, nil
}
