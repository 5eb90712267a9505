package cutover

import (
	"errors"
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/ops/state"
)

func healthyFacts() Facts {
	return Facts{
		ArmRollback: true, CandidateVersion: "v2", CurrentVersion: "v1", Digest: "sha256:aa",
		CanaryOK: true, StressOK: true, BackendActive: "active",
		Tunnels: []TunnelFact{
			{Name: "a", Unit: "a.service", ActiveState: "active", InvocationID: "1"},
			{Name: "b", Unit: "b.service", ActiveState: "active", InvocationID: "2"},
		},
	}
}

func TestPlanPreflight(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		change   func(*Facts)
		usage    bool
		refusals []string // substrings, one per refusal, in order
		warn     bool
	}{
		{name: "healthy", change: func(*Facts) {}},
		{name: "not armed", change: func(f *Facts) { f.ArmRollback = false }, usage: true},
		{name: "not armed wins over everything", change: func(f *Facts) { f.ArmRollback = false; f.CandidateErr = boom }, usage: true},
		{name: "bad candidate", change: func(f *Facts) { f.CandidateErr = boom }, refusals: []string{"candidate: boom"}},
		{name: "no canary", change: func(f *Facts) { f.CanaryOK = false }, refusals: []string{"no passing canary"}},
		{name: "no stress", change: func(f *Facts) { f.StressOK = false }, refusals: []string{"no passing stress"}},
		{name: "skipped with reason", change: func(f *Facts) { f.CanaryOK, f.StressOK, f.SkipCanaryReason = false, false, "hotfix" }, warn: true},
		{name: "blank reason skips nothing", change: func(f *Facts) { f.CanaryOK, f.SkipCanaryReason = false, "  " }, refusals: []string{"no passing canary"}},
		{name: "same version", change: func(f *Facts) { f.CandidateVersion = "v1" }, refusals: []string{"already current"}},
		{name: "pending", change: func(f *Facts) { f.Pending = &state.Pending{ToVersion: "v9", SnapshotID: "s"} }, refusals: []string{"still pending"}},
		{name: "backend down", change: func(f *Facts) { f.BackendActive = "failed"; f.HealthzErr = boom }, refusals: []string{`"failed"`, "/healthz"}},
		{name: "backend not ready", change: func(f *Facts) { f.ReadyzErr = boom }, refusals: []string{"/readyz"}},
		{name: "tunnel inactive", change: func(f *Facts) { f.Tunnels[1].ActiveState = "inactive" }, refusals: []string{"tunnel b"}},
		{name: "tunnel unready", change: func(f *Facts) { f.Tunnels[0].ReadyErr = boom }, refusals: []string{"tunnel a: boom"}},
		{name: "no tunnels", change: func(f *Facts) { f.Tunnels = nil }, refusals: []string{"no tunnels"}},
		{name: "duplicate", change: func(f *Facts) { f.Duplicates = []string{"pid 7 on :3210"} }, refusals: []string{"duplicate supervisor: pid 7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := healthyFacts()
			tc.change(&f)
			p := PlanPreflight(f)
			if (p.Usage != "") != tc.usage {
				t.Fatalf("usage = %q, want usage %v", p.Usage, tc.usage)
			}
			if tc.usage {
				if p.OK() || !strings.Contains(p.Usage, "--arm-rollback") {
					t.Fatalf("usage refusal must name --arm-rollback: %+v", p)
				}
				return
			}
			if len(p.Refusals) != len(tc.refusals) {
				t.Fatalf("refusals = %q, want %d like %q", p.Refusals, len(tc.refusals), tc.refusals)
			}
			for i, want := range tc.refusals {
				if !strings.Contains(p.Refusals[i], want) {
					t.Errorf("refusal %d = %q, want it to contain %q", i, p.Refusals[i], want)
				}
			}
			if p.OK() != (len(tc.refusals) == 0) {
				t.Fatalf("OK = %v with refusals %q", p.OK(), p.Refusals)
			}
			if (len(p.Warnings) > 0) != tc.warn {
				t.Fatalf("warnings = %q, want some: %v", p.Warnings, tc.warn)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	boom := errors.New("boom")
	want := Expect{Version: "v2", Digest: "sha256:bb"}
	before := healthyFacts().Tunnels
	good := func() Observed {
		return Observed{Version: "v2", Digest: "sha256:bb", Tunnels: []TunnelFact{
			{Name: "a", Unit: "a.service", ActiveState: "active", InvocationID: "1"},
			{Name: "b", Unit: "b.service", ActiveState: "active", InvocationID: "2"},
		}}
	}
	tests := []struct {
		name   string
		change func(*Observed)
		fails  []string
	}{
		{name: "verified", change: func(*Observed) {}},
		{name: "old version still running", change: func(o *Observed) { o.Version = "v1" }, fails: []string{`version "v1"`}},
		{name: "other build", change: func(o *Observed) { o.Digest = "sha256:cc" }, fails: []string{"build"}},
		{name: "info unreachable", change: func(o *Observed) { o.InfoErr = boom; o.Version = "" }, fails: []string{"system.info"}},
		{name: "not ready", change: func(o *Observed) { o.ReadyzErr = boom }, fails: []string{"/readyz"}},
		{name: "shell broken", change: func(o *Observed) { o.ShellErr = boom }, fails: []string{"shell.exec"}},
		{name: "file.list broken", change: func(o *Observed) { o.FileListErr = boom }, fails: []string{"file.list"}},
		{name: "tunnel restarted", change: func(o *Observed) { o.Tunnels[0].InvocationID = "9" }, fails: []string{"was restarted"}},
		{name: "tunnel down", change: func(o *Observed) { o.Tunnels[1].ActiveState = "failed"; o.Tunnels[1].ReadyErr = boom }, fails: []string{"not active", "tunnel b /readyz"}},
		{name: "tunnel shell", change: func(o *Observed) { o.Tunnels[1].ShellErr = boom }, fails: []string{"tunnel b shell.exec"}},
		{name: "tunnel missing", change: func(o *Observed) { o.Tunnels = o.Tunnels[:1] }, fails: []string{"tunnel b was not observed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.change(&o)
			got := Judge(want, before, o)
			if len(got) != len(tc.fails) {
				t.Fatalf("failures = %q, want %q", got, tc.fails)
			}
			for i, w := range tc.fails {
				if !strings.Contains(got[i], w) {
					t.Errorf("failure %d = %q, want %q", i, got[i], w)
				}
			}
		})
	}
}

func TestPlanRollback(t *testing.T) {
	pending := &state.Pending{SnapshotID: "S1", Nonce: "n1", FromVersion: "v1", ToVersion: "v2"}
	tests := []struct {
		name     string
		facts    RollbackFacts
		act      bool
		snapshot string
		nonce    string
		reason   string
	}{
		{name: "timer with live nonce", facts: RollbackFacts{SnapshotID: "S1", Nonce: "n1", Pending: pending}, act: true, snapshot: "S1", nonce: "n1"},
		{name: "timer after confirm", facts: RollbackFacts{SnapshotID: "S1", Nonce: "n1"}, reason: "stale nonce"},
		{name: "timer of an older cutover", facts: RollbackFacts{SnapshotID: "S0", Nonce: "n0", Pending: pending}, reason: "stale nonce"},
		{name: "boot with marker", facts: RollbackFacts{IfPending: true, Pending: pending}, act: true, snapshot: "S1", nonce: "n1"},
		{name: "boot without marker", facts: RollbackFacts{IfPending: true, Newest: "S1"}, reason: "no cutover pending"},
		{name: "operator, pending", facts: RollbackFacts{Pending: pending, Newest: "S9"}, act: true, snapshot: "S1", nonce: "n1"},
		{name: "operator names snapshot", facts: RollbackFacts{SnapshotID: "S0", Newest: "S1"}, act: true, snapshot: "S0"},
		{name: "operator names other snapshot while pending", facts: RollbackFacts{SnapshotID: "S0", Pending: pending}, act: true, snapshot: "S0", nonce: "n1", reason: "pending cutover expected S1"},
		{name: "operator, nothing pending", facts: RollbackFacts{Newest: "S1"}, act: true, snapshot: "S1"},
		{name: "nothing at all", facts: RollbackFacts{}, reason: "no snapshot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanRollback(tc.facts)
			if p.Act != tc.act || p.SnapshotID != tc.snapshot || p.Nonce != tc.nonce {
				t.Fatalf("plan = %+v, want act=%v snapshot=%q nonce=%q", p, tc.act, tc.snapshot, tc.nonce)
			}
			if p.Reason == "" || !strings.Contains(p.Reason, tc.reason) {
				t.Fatalf("reason = %q, want %q", p.Reason, tc.reason)
			}
		})
	}
}
