package stress_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/stress"
)

// serves is a target that reports one build in system.info.
type serves struct {
	build string
	err   error
}

func (s serves) SystemInfo(context.Context, string) (string, string, error) {
	return "v-test", s.build, s.err
}

func TestRecordVerdict(t *testing.T) {
	pid := uint32(os.Getpid())
	self, err := stress.ExeDigest(pid)
	if err != nil {
		t.Fatal(err)
	}
	sampled := &stress.UnitReport{Name: "fake.service", First: stress.UnitSample{MainPID: pid}, Last: stress.UnitSample{MainPID: pid}}
	report := func(units *stress.UnitReport, checks ...stress.Check) *stress.Report {
		return &stress.Report{Target: "http://127.0.0.1:1", Unit: "fake.service", Profile: stress.Overload, UnitSamples: units,
			Checks: checks, Pass: stress.Passed(checks)}
	}
	ok := stress.Check{Name: "shell.bound", Status: stress.Pass}
	tests := []struct {
		name     string
		rep      *stress.Report
		who      serves
		wantErr  bool
		recorded bool
		pass     bool
		note     string
		summary  string
	}{
		{"no unit: nothing to record", report(nil, ok), serves{build: self}, false, false, false, "no unit sampled", ""},
		{"the target serves another build", report(sampled, ok), serves{build: "sha256:0"}, true, false, false, "a build that was not stressed", ""},
		{"the target does not answer", report(sampled, ok), serves{err: errors.New("refused")}, true, false, false, "unproven: refused", ""},
		{"a premise skipped: not a pass", report(sampled, ok, stress.Check{Name: "shell.reaches.limit", Status: stress.Skip}), serves{build: self},
			false, true, false, "recorded as NOT passing: the run skipped shell.reaches.limit", "INCONCLUSIVE, skipped shell.reaches.limit"},
		{"a failed check", report(sampled, ok, stress.Check{Name: "unit.stable", Status: stress.Fail}), serves{build: self},
			false, true, false, "", "FAIL unit.stable"},
		{"the stressed build passed", report(sampled, ok), serves{build: self}, false, true, true, "", "all checks passed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := state.Dir(t.TempDir())
			err := stress.RecordVerdict(t.Context(), dir, tc.rep, tc.who)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			b := tc.rep.Build
			if b == nil || b.Recorded != tc.recorded || !strings.Contains(b.Note, tc.note) {
				t.Fatalf("build = %+v, want recorded %v and a note with %q", b, tc.recorded, tc.note)
			}
			vs, err := dir.Verdicts()
			if err != nil {
				t.Fatal(err)
			}
			if !tc.recorded {
				if len(vs) != 0 {
					t.Fatalf("verdicts %+v, want none", vs)
				}
				return
			}
			if len(vs) != 1 || vs[0].Kind != state.KindStress || vs[0].Digest != self || vs[0].Version != "v-test" || vs[0].Pass != tc.pass || !strings.HasSuffix(vs[0].Summary, tc.summary) {
				t.Fatalf("verdicts %+v, want one for %s, pass %v, summary ending %q", vs, self, tc.pass, tc.summary)
			}
		})
	}
}
