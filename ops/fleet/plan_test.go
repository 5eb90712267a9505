package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func threeHosts() *Inventory {
	inv := Default()
	for i := 1; i <= 3; i++ {
		inv.Hosts = append(inv.Hosts, Host{Name: fmt.Sprintf("h%d", i), Address: "127.0.0.1", Port: 2200 + i})
	}
	inv.Rollout.Waves = []WaveSize{{Count: 1}, {Percent: 50}, {Percent: 100}}
	return inv
}

func healthy(id, digest string) *Facts {
	return &Facts{MachineID: id, Version: "v1", Digest: digest, Healthy: true, DiskFree: 1 << 30}
}

func TestPlanRollout(t *testing.T) {
	const target, old = "sha256:new", "sha256:old"
	cases := []struct {
		name    string
		h2      Observed
		problem string // on h2; "" for none
		skip    bool
	}{
		{"ready", Observed{Facts: healthy("m2", old)}, "", false},
		{"already on the build, verified: skipped", Observed{Facts: healthy("m2", target)}, "", true},
		{"on the build but unhealthy is not done", Observed{Facts: &Facts{MachineID: "m2", Version: "v2", Digest: target, DiskFree: 1 << 30, HealthErr: "refused"}}, "not healthy", false},
		{"unreachable", Observed{Err: fmt.Errorf("ssh: Host key verification failed: %w", ErrUnreachable)}, "Host key verification failed", false},
		{"same machine as h1: a mis-wired port", Observed{Facts: healthy("m1", old)}, "same machine", false},
		{"pending cutover", Observed{Facts: func() *Facts {
			f := healthy("m2", old)
			f.Pending = &PendingFact{SnapshotID: "s1", ToVersion: "v9", Deadline: time.Unix(0, 0)}
			return f
		}()}, "pending", false},
		{"locked", Observed{Facts: func() *Facts { f := healthy("m2", old); f.Locked = "pid 7 (cutover)"; return f }()}, "locked by pid 7", false},
		{"not installed", Observed{Facts: &Facts{MachineID: "m2", Healthy: true, DiskFree: 1 << 30}}, "no production installed", false},
		{"no space for the build", Observed{Facts: func() *Facts { f := healthy("m2", old); f.DiskFree = 100; return f }()}, "bytes free", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := map[string]Observed{"h1": {Facts: healthy("m1", old)}, "h2": c.h2, "h3": {Facts: healthy("m3", old)}}
			p := PlanRollout(threeHosts(), obs, target, "v2", 1000)
			if len(p.Waves) != 2 || len(p.Waves[0].Hosts) != 1 || len(p.Waves[1].Hosts) != 2 {
				t.Fatalf("waves %+v", p.Waves)
			}
			h2 := p.Hosts[1]
			switch {
			case c.problem == "" && len(p.Problems) != 0:
				t.Fatalf("problems %v, want none", p.Problems)
			case c.problem != "" && (len(p.Problems) != 1 || !strings.Contains(h2.Problem, c.problem) || !strings.HasPrefix(p.Problems[0], "h2: ")):
				t.Fatalf("problems %v (h2: %q), want exactly h2's containing %q", p.Problems, h2.Problem, c.problem)
			}
			if h2.Skip != c.skip {
				t.Fatalf("skip = %v, want %v", h2.Skip, c.skip)
			}
		})
	}
}

func TestDecideWave(t *testing.T) {
	cases := []struct {
		name     string
		policy   string
		max      int
		outcomes map[string]Outcome
		want     Decision
	}{
		{"all verified", Revert, 0, map[string]Outcome{"a": Verified, "b": Skipped}, Continue},
		{"one rolled back, revert", Revert, 0, map[string]Outcome{"a": Verified, "b": RolledBack}, RevertRun},
		{"one rolled back, halt", Halt, 0, map[string]Outcome{"a": Verified, "b": RolledBack}, HaltRun},
		{"unreachable counts as failed", Revert, 0, map[string]Outcome{"a": Unreachable}, RevertRun},
		{"refused counts as failed", Halt, 0, map[string]Outcome{"a": Refused}, HaltRun},
		{"within maxFailures", Revert, 1, map[string]Outcome{"a": Refused, "b": Verified}, Continue},
		{"hosts not started do not count", Revert, 0, map[string]Outcome{"a": Verified, "b": ""}, Continue},
		{"beyond maxFailures", Revert, 1, map[string]Outcome{"a": Refused, "b": Unreachable}, RevertRun},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Default().Rollout
			r.OnFailure, r.MaxFailures = c.policy, c.max
			if got, _ := DecideWave(r, c.outcomes); got != c.want {
				t.Fatalf("DecideWave = %s, want %s", got, c.want)
			}
		})
	}
}

func code(c int) *int { return &c }

// TestReplay: the run log replayed gives each host's outcome, the snapshots
// a revert needs (newest wave first) and the step a killed controller left
// open.
func TestReplay(t *testing.T) {
	l := &RunLog{Path: filepath.Join(t.TempDir(), "f.runs.jsonl")}
	waves := []Wave{{Index: 1, Hosts: []string{"h1"}}, {Index: 2, Hosts: []string{"h2", "h3"}}}
	evs := []Event{
		{Run: "old", Type: EvRunStart, Waves: waves},
		{Run: "old", Type: EvHostEnd, Host: "h1", Outcome: Verified, Snapshot: "old-s1"},
		{Run: "r1", Type: EvRunStart, Waves: waves, Digest: "sha256:x", Version: "v2"},
		{Run: "r1", Type: EvHostEnd, Host: "h1", Wave: 1, Outcome: Verified, Snapshot: "s1", From: "v1"},
		{Run: "r1", Type: EvWaveEnd, Wave: 1, Decision: Continue},
		{Run: "r1", Type: EvStepStart, Host: "h2", Wave: 2, Step: "cutover", StepID: "r1-h2-6-cutover"},
		{Run: "r1", Type: EvStepStart, Host: "h3", Wave: 2, Step: "cutover", StepID: "r1-h3-6-cutover"},
		{Run: "r1", Type: EvStepEnd, Host: "h3", Wave: 2, Step: "cutover", StepID: "r1-h3-6-cutover", ExitCode: code(0), Snapshot: "s3", From: "v1"},
		{Run: "r1", Type: EvHostEnd, Host: "h3", Wave: 2, Outcome: Verified, Snapshot: "s3", From: "v1"},
	}
	for _, e := range evs {
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Read()
	if err != nil || len(got) != len(evs) {
		t.Fatalf("read %d events, %v", len(got), err)
	}
	rs := LastRun(got)
	if rs.Start.Run != "r1" || rs.Code() != -1 {
		t.Fatalf("last run %s code %d", rs.Start.Run, rs.Code())
	}
	if o := rs.Hosts["h2"].Open; o == nil || o.StepID != "r1-h2-6-cutover" {
		t.Fatalf("h2 open step %+v, want the cutover", o)
	}
	if rs.Hosts["h3"].Open != nil {
		t.Fatalf("h3's step ended, not open")
	}
	// A step that ended without an outcome (the host unreachable) stays
	// open: the resumed run reads its outcome from the host.
	lost := LastRun(append(got, Event{Run: "r1", Type: EvStepEnd, Host: "h2", Step: "cutover", StepID: "r1-h2-6-cutover", Detail: "host unreachable"}))
	if o := lost.Hosts["h2"].Open; o == nil {
		t.Fatalf("a step without an outcome was closed")
	}
	order := RevertOrder(rs)
	if len(order) != 2 || order[0].Host != "h3" || order[0].Snapshot != "s3" || order[1].Host != "h1" || order[1].Snapshot != "s1" {
		t.Fatalf("revert order %+v, want h3 (wave 2) then h1, this run's snapshots", order)
	}
	if rs, err := ResumeState(got); err != nil || rs.Start.Run != "r1" {
		t.Fatalf("ResumeState: %v", err)
	}

	// A finished or reverted run has nothing to resume.
	done := append(got, Event{Run: "r1", Type: EvRunEnd, Code: code(0)})
	if _, err := ResumeState(done); err == nil || !strings.Contains(err.Error(), "finished") {
		t.Fatalf("resume of a finished run: %v", err)
	}
	reverted := append(got, Event{Run: "r1", Type: EvRevertStart}, Event{Run: "r1", Type: EvRunEnd, Code: code(CodeReverted)})
	if _, err := ResumeState(reverted); err == nil || !strings.Contains(err.Error(), "reverted") {
		t.Fatalf("resume of a reverted run: %v", err)
	}
	// A revert that was cut short is resumed as a revert.
	cut := append(got, Event{Run: "r1", Type: EvRevertStart})
	if rs, err := ResumeState(cut); err != nil || !rs.Revert {
		t.Fatalf("resume of a cut revert: %v %+v", err, rs)
	}
}

func TestRunLogTornLine(t *testing.T) {
	l := &RunLog{Path: filepath.Join(t.TempDir(), "f.runs.jsonl")}
	if err := l.Append(Event{Run: "r1", Type: EvRunStart}); err != nil {
		t.Fatal(err)
	}
	if err := appendRaw(l.Path, `{"run":"r1","type":"wave-st`); err != nil {
		t.Fatal(err)
	}
	evs, err := l.Read()
	if err != nil || len(evs) != 1 {
		t.Fatalf("read %d events, %v; want the torn last line skipped", len(evs), err)
	}
	// The next append terminates the torn line; the torn line in the
	// middle is then an error, not silently skipped.
	if err := l.Append(Event{Run: "r1", Type: EvRunEnd}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(); err == nil {
		t.Fatal("a broken line in the middle of the log was accepted")
	}
}

func TestLockIsExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.lock")
	l, err := TakeLock(context.Background(), p, "rollout", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TakeLock(context.Background(), p, "resume", 0, nil); !errors.Is(err, ErrFleetLocked) || !strings.Contains(err.Error(), "rollout") {
		t.Fatalf("second lock: %v, want ErrFleetLocked naming the holder", err)
	}
	l.Release()
	l2, err := TakeLock(context.Background(), p, "resume", 0, nil)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l2.Release()
}

func appendRaw(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}
