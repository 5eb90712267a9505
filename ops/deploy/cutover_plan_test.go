package deploy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
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
		{name: "release name taken by another build", change: func(f *Facts) { f.ReleaseDigest = "sha256:bb" }, refusals: []string{"release v2 is already installed with build sha256:bb"}},
		{name: "release already installed as this build", change: func(f *Facts) { f.ReleaseDigest = "sha256:aa" }},
		{name: "pending", change: func(f *Facts) { f.Pending = &state.Pending{ToVersion: "v9", SnapshotID: "s"} }, refusals: []string{"still pending"}},
		{name: "backend down", change: func(f *Facts) { f.BackendActive = "failed"; f.HealthzErr = boom }, refusals: []string{`"failed"`, "/healthz"}},
		{name: "backend failed for good names recover", change: func(f *Facts) { f.BackendActive = "failed"; f.HealthzErr = boom }, refusals: []string{"run `mcpctl recover` first", "/healthz"}},
		{name: "backend not ready", change: func(f *Facts) { f.ReadyzErr = boom }, refusals: []string{"/readyz"}},
		{name: "tunnel inactive", change: func(f *Facts) { f.Tunnels[1].ActiveState = "inactive" }, refusals: []string{"tunnel b"}},
		{name: "tunnel unready", change: func(f *Facts) { f.Tunnels[0].ReadyErr = boom }, refusals: []string{"tunnel a: boom"}},
		{name: "no tunnels", change: func(f *Facts) { f.Tunnels = nil }, refusals: []string{"no tunnels"}},
		{name: "socket listening", change: func(f *Facts) { f.Socket = listening() }},
		{name: "no socket unit yet", change: func(f *Facts) {
			f.Socket = &SocketFact{Unit: "mcp-backend.socket", LoadState: "not-found", ActiveState: "inactive"}
		}},
		{name: "socket not listening yet", change: func(f *Facts) { f.Socket = listening(); f.Socket.ActiveState = "inactive" }, warn: true},
		{name: "socket failed", change: func(f *Facts) { f.Socket = listening(); f.Socket.ActiveState = "failed" }, warn: true},
		{name: "socket unreadable", change: func(f *Facts) { f.Socket = &SocketFact{Unit: "mcp-backend.socket", Err: boom} }, refusals: []string{"socket mcp-backend.socket is unknown: boom"}},
		{name: "duplicate", change: func(f *Facts) { f.Duplicates = []string{"pid 7 on :3210"} }, refusals: []string{"duplicate supervisor: pid 7"}},
		{name: "second unit on the same binary", change: func(f *Facts) {
			sup := supervision(svc("legacy-mcp.service", "active", "/opt/mcp-backend/current/mcp-backend", "serve"))
			f.Supervision = &sup
		}, refusals: []string{"duplicate supervisor: legacy-mcp.service"}},
		{name: "listener and unit both reported", change: func(f *Facts) {
			f.Duplicates = []string{"pid 7 on :3210"}
			sup := supervision(svc("legacy-mcp.service", "active", "/opt/mcp-backend/current/mcp-backend", "serve"))
			f.Supervision = &sup
		}, refusals: []string{"pid 7", "legacy-mcp.service"}},
		{name: "only production's own units", change: func(f *Facts) {
			sup := supervision(svc("mcp-backend.service", "active", "/opt/mcp-backend/current/mcp-backend", "serve"))
			f.Supervision = &sup
		}},
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

// listening is production's socket unit, active since a fixed time.
func listening() *SocketFact {
	return &SocketFact{Unit: "mcp-backend.socket", LoadState: "loaded", ActiveState: "active", InvocationID: "s1", ActiveEnter: time.Unix(100, 0)}
}

func TestJudge(t *testing.T) {
	boom := errors.New("boom")
	want := Expect{Version: "v2", Digest: "sha256:bb", Socket: listening()}
	before := healthyFacts().Tunnels
	good := func() Observed {
		return Observed{Version: "v2", Digest: "sha256:bb", Socket: listening(), Tunnels: []TunnelFact{
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
		{name: "socket restarted", change: func(o *Observed) { o.Socket.InvocationID = "s2" }, fails: []string{"socket mcp-backend.socket: the socket was stopped or restarted"}},
		{name: "socket re-entered active", change: func(o *Observed) { o.Socket.ActiveEnter = time.Unix(200, 0) }, fails: []string{"stopped or restarted"}},
		{name: "socket stopped", change: func(o *Observed) { o.Socket.ActiveState = "inactive" }, fails: []string{"stopped or restarted"}},
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

func svc(name, active string, argv ...string) ServiceFact {
	return ServiceFact{Name: name, ActiveState: active, Exec: []unitstate.ExecCommand{{Path: argv[0], Argv: argv}}}
}

func supervision(services ...ServiceFact) Supervision {
	return Supervision{
		BackendUnit: "mcp-backend.service", CanaryUnit: "mcp-backend-canary.service", WatchdogService: "mcp-watchdog.service",
		CurrentBinary: "/opt/mcp-backend/current/mcp-backend", ReleasesDir: "/opt/mcp-backend/releases",
		Services: services,
	}
}

func TestDuplicateSupervisors(t *testing.T) {
	const cur = "/opt/mcp-backend/current/mcp-backend"
	const rel = "/opt/mcp-backend/releases/v1/mcp-backend"
	const ctl = "/usr/local/bin/mcpctl"
	with := func(f ServiceFact, change func(*ServiceFact)) ServiceFact { change(&f); return f }
	tests := []struct {
		name string
		sup  Supervision
		want []string // substrings, one per reason, in order
	}{
		{name: "production, canary, watchdog, tunnels and rollback units are ours", sup: supervision(
			svc("mcp-backend.service", "active", cur, "serve", "--config", "/etc/c.json"),
			svc("mcp-backend-canary.service", "active", rel, "serve"),
			svc("mcp-watchdog.service", "inactive", ctl, "--config", "/etc/m.json", "watchdog"),
			svc("mcp-tunnel-overdeck.service", "active", "/usr/bin/socat", "TCP-LISTEN:1", "TCP:127.0.0.1:3210"),
			svc("mcpctl-pending-rollback.service", "inactive", ctl, "rollback", "--if-pending"),
			svc("mcpctl-rollback.service", "inactive", ctl, "rollback", "--snapshot", "s", "--nonce", "n"),
		)},
		{name: "a second unit on current", sup: supervision(svc("legacy-mcp.service", "active", cur, "serve")),
			want: []string{"legacy-mcp.service (active) also runs " + cur}},
		{name: "a second unit on a release binary", sup: supervision(svc("old.service", "activating", rel, "serve")),
			want: []string{"old.service (activating) also runs " + rel}},
		{name: "through a shell", sup: supervision(svc("sh.service", "active", "/bin/sh", "/bin/sh", "-c", "exec "+cur+" serve")),
			want: []string{"sh.service"}},
		{name: "uncleaned path", sup: supervision(svc("dots.service", "active", "/opt/mcp-backend/./current/mcp-backend")),
			want: []string{"dots.service"}},
		{name: "a job's supervisor is not a second backend", sup: supervision(svc("mcp-job-j0123456789abcdef.service", "active", rel, "job-exec", "--dir", "/var/lib/mcp-backend/jobs/v1/j0123456789abcdef"))},
		{name: "but job-exec through a shell may be anything", sup: supervision(svc("sh.service", "active", "/bin/sh", "/bin/sh", "-c", rel+" job-exec; "+rel+" serve")),
			want: []string{"sh.service"}},
		{name: "a stopped, disabled leftover is not a supervisor", sup: supervision(svc("legacy-mcp.service", "inactive", cur, "serve"))},
		{name: "a failed one neither", sup: supervision(svc("legacy-mcp.service", "failed", cur, "serve"))},
		{name: "but an enabled one starts at boot", sup: supervision(with(svc("legacy-mcp.service", "inactive", cur), func(f *ServiceFact) { f.UnitFileState = "enabled" })),
			want: []string{"legacy-mcp.service (enabled at boot)"}},
		{name: "another binary of the same name elsewhere", sup: supervision(svc("other.service", "active", "/srv/mcp-backend", "serve"))},
		{name: "another file under releases", sup: supervision(svc("other.service", "active", "/opt/mcp-backend/releases/v1/helper"))},
		{name: "a second watchdog run by its timer", sup: supervision(with(svc("my-watchdog.service", "inactive", ctl, "--config", "/x.json", "watchdog"),
			func(f *ServiceFact) { f.ActiveTriggers = []string{"my-watchdog.timer"} })),
			want: []string{"my-watchdog.service (started by my-watchdog.timer) runs a second watchdog"}},
		{name: "a second watchdog running now, another mcpctl path", sup: supervision(svc("wd.service", "active", "/opt/bin/mcpctl", "/opt/bin/mcpctl", "watchdog", "--threshold", "1")),
			want: []string{"wd.service (active) runs a second watchdog"}},
		{name: "mcpctl doing something else", sup: supervision(svc("st.service", "active", ctl, ctl, "status"))},
		{name: "a dormant watchdog unit", sup: supervision(svc("my-watchdog.service", "inactive", ctl, ctl, "watchdog"))},
		{name: "the canary name running a watchdog is still a second watchdog", sup: supervision(svc("mcp-backend-canary.service", "active", ctl, ctl, "watchdog")),
			want: []string{"second watchdog"}},
		{name: "unreadable ExecStart of a live unit", sup: supervision(with(svc("x.service", "active", "/bin/x"), func(f *ServiceFact) { f.Err = errors.New("denied") })),
			want: []string{"x.service (active): cannot read its ExecStart: denied"}},
		{name: "units not listed", sup: Supervision{ListErr: errors.New("bus down")}, want: []string{"cannot list systemd units"}},
		{name: "two at once", sup: supervision(svc("a.service", "active", cur), svc("b.service", "active", ctl, ctl, "watchdog")),
			want: []string{"a.service", "b.service"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DuplicateSupervisors(tc.sup)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("reason %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
