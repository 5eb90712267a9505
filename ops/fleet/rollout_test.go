package fleet

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// scripted is a Remote whose hosts are maps in memory: it stands in for
// the SSH transport only to drive the executor through orders of events
// the real hosts cannot be made to produce on cue (a controller killed
// between two particular calls). The real transport and hosts are
// TestFleetInContainers.
type scripted struct {
	mu sync.Mutex
	// digest each host runs; a cutover moves it to the build's.
	runs map[string]string
	// failCutover: hosts whose cutover fails verification (exit 3).
	failCutover map[string]bool
	// steps started per host, in order; results by step id.
	started map[string][]string
	results map[string]*StepResult
	// uploads per host.
	uploads map[string]int
	build   string
	// lockedCutovers: how many more times a host refuses its cutover
	// because its mcpctl lock stays held (exit 1, mcpctl's lockHeld error).
	lockedCutovers map[string]int
	// refuseCutover: hosts whose cutover is refused for another reason.
	refuseCutover map[string]bool
	// lockedFacts: how many more reads of a host's facts say its lock is held.
	lockedFacts map[string]int
}

func newScripted(build string, hosts ...string) *scripted {
	s := &scripted{runs: map[string]string{}, failCutover: map[string]bool{}, started: map[string][]string{},
		results: map[string]*StepResult{}, uploads: map[string]int{}, build: build,
		lockedCutovers: map[string]int{}, refuseCutover: map[string]bool{}, lockedFacts: map[string]int{}}
	for _, h := range hosts {
		s.runs[h] = "sha256:old"
	}
	return s
}

func (s *scripted) Facts(_ context.Context, h *Host) (*Facts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &Facts{MachineID: "m-" + h.Name, Version: "v", Digest: s.runs[h.Name], Healthy: true, DiskFree: 1 << 40}
	if s.lockedFacts[h.Name] > 0 {
		s.lockedFacts[h.Name]--
		f.Locked = "pid 7 (watchdog) since 2026-01-02T03:04:05Z"
	}
	return f, nil
}

func (s *scripted) Upload(_ context.Context, h *Host, _, digest string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads[h.Name]++
	return "/f/blobs/" + digest, nil
}

func (s *scripted) Start(_ context.Context, h *Host, _, id string, args []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := strings.Join(args, " ")
	s.started[h.Name] = append(s.started[h.Name], id)
	res := &StepResult{ID: id, State: StepDone, Started: time.Now(), Ended: time.Now()}
	switch {
	case strings.Contains(cmd, " cutover ") && s.lockedCutovers[h.Name] > 0:
		s.lockedCutovers[h.Name]--
		res.ExitCode = 1
		res.Stderr = "waiting up to 30s for the mcpctl lock: pid 7 (snapshot create) since 2026-01-02T03:04:05Z holds it\n" +
			`{"error":{"message":"cutover: another mcpctl command is running","exitCode":1,"lockHeld":{"path":"/var/lib/mcpctl/lock","holder":{"pid":7,"owner":"snapshot create","since":"2026-01-02T03:04:05Z"}}}}` + "\n"
	case strings.Contains(cmd, " cutover ") && s.refuseCutover[h.Name]:
		res.ExitCode = 1
		res.Stderr = `{"error":{"message":"cutover: refused: preflight","exitCode":1}}` + "\n"
	case strings.Contains(cmd, " cutover "):
		if s.failCutover[h.Name] {
			res.ExitCode = 3
		} else {
			s.runs[h.Name] = s.build
			res.Stdout = `{"fromVersion":"v","snapshotId":"snap-` + h.Name + `"}`
		}
	case strings.Contains(cmd, " rollback --snapshot "):
		s.runs[h.Name] = "sha256:old"
	}
	s.results[id] = res
	return nil
}

func (s *scripted) Wait(_ context.Context, _ *Host, agent, id string, _ time.Duration) (*StepResult, error) {
	if agent == "" {
		// As the SSH runner: an empty word never reaches a command line.
		return nil, fmt.Errorf("remote argument %q refused", agent)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.results[id]; ok {
		return r, nil
	}
	return &StepResult{ID: id, State: StepAbsent}, nil
}

func scriptedRunner(t *testing.T, r *scripted, policy string, parallelism int) (*Runner, *Inventory) {
	t.Helper()
	inv := threeHosts()
	inv.Path = filepath.Join(t.TempDir(), "mcpctl-fleet.json")
	inv.Rollout.OnFailure, inv.Rollout.Parallelism = policy, parallelism
	return &Runner{Inv: inv, Remote: r, Log: &RunLog{Path: inv.LogPath()}, Self: "/bin/mcpctl", SelfDigest: "sha256:self"}, inv
}

func (r *Runner) plan(t *testing.T, digest string) *RunState {
	t.Helper()
	p := PlanRollout(r.Inv, r.Observe(context.Background()), digest, "v2", 1)
	if len(p.Problems) > 0 {
		t.Fatal(p.Problems)
	}
	rs, err := r.Start(p, "r1", "/builds/b")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestRunnerRevertsNewestWaveFirst(t *testing.T) {
	rem := newScripted("sha256:new", "h1", "h2", "h3")
	rem.failCutover["h3"] = true
	r, _ := scriptedRunner(t, rem, Revert, 4)
	res := r.Run(context.Background(), r.plan(t, "sha256:new"))
	if res.Code != CodeReverted {
		t.Fatalf("code %d (%s), want %d", res.Code, res.Message, CodeReverted)
	}
	for h, d := range rem.runs {
		if d != "sha256:old" {
			t.Errorf("%s runs %s after the revert", h, d)
		}
	}
	// h2 (wave 2) was rolled back before h1 (wave 1).
	evs, _ := r.Log.Read()
	var order []string
	for _, e := range evs {
		if e.Type == EvRevertHost {
			order = append(order, e.Host+"="+string(e.Outcome)+"@"+e.Snapshot)
		}
	}
	if fmt.Sprint(order) != "[h2=reverted@snap-h2 h1=reverted@snap-h1]" {
		t.Fatalf("revert order %v", order)
	}
}

func TestRunnerStopsAFailedWave(t *testing.T) {
	rem := newScripted("sha256:new", "h1", "h2", "h3")
	rem.failCutover["h2"] = true
	r, _ := scriptedRunner(t, rem, Halt, 1)
	res := r.Run(context.Background(), r.plan(t, "sha256:new"))
	if res.Code != CodeMixed || res.Hosts["h3"] != "" || res.Hosts["h2"] != RolledBack || res.Hosts["h1"] != Verified {
		t.Fatalf("code %d hosts %v, want halted with h3 never started", res.Code, res.Hosts)
	}
	if len(rem.started["h3"]) != 0 || rem.uploads["h3"] != 0 {
		t.Fatalf("h3 was reached: %v, %d uploads", rem.started["h3"], rem.uploads["h3"])
	}
	// Resume (the fault fixed) finishes h2 and h3 and leaves h1 alone.
	rem.failCutover["h2"] = false
	before := len(rem.started["h1"])
	evs, _ := r.Log.Read()
	rs, err := ResumeState(evs)
	if err != nil {
		t.Fatal(err)
	}
	if res := r.Run(context.Background(), rs); res.Code != 0 {
		t.Fatalf("resume: code %d (%s)", res.Code, res.Message)
	}
	if len(rem.started["h1"]) != before {
		t.Fatal("resume started steps on h1, which was done")
	}
	for h, d := range rem.runs {
		if d != "sha256:new" {
			t.Errorf("%s runs %s after the resume", h, d)
		}
	}
}

// TestResumeAfterAKill: an upload cut short is redone, not waited on;
// a cutover left open is read from the host, not run again.
func TestResumeAfterAKill(t *testing.T) {
	rem := newScripted("sha256:new", "h1", "h2", "h3")
	r, _ := scriptedRunner(t, rem, Revert, 4)
	r.plan(t, "sha256:new") // logs run-start
	// The controller died: h1's cutover had started (its outcome is on the
	// host), h2 was uploading.
	if err := rem.Start(context.Background(), &r.Inv.Hosts[0], "/a", "r1-h1-6-cutover", []string{"--json", "cutover", "--build", "/b"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Event{
		{Run: "r1", Type: EvWaveStart, Wave: 1},
		{Run: "r1", Type: EvStepStart, Wave: 1, Host: "h1", Step: "cutover", StepID: "r1-h1-6-cutover", Detail: "/a --json cutover --build /b"},
		{Run: "r1", Type: EvStepStart, Wave: 2, Host: "h2", Step: "upload-build", StepID: "r1-h2-2-upload-build"},
	} {
		if err := r.Log.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := r.Log.Read()
	rs, err := ResumeState(evs)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Run(context.Background(), rs)
	if res.Code != 0 {
		t.Fatalf("resume: code %d (%s) %v", res.Code, res.Message, res.Hosts)
	}
	if n := len(rem.started["h1"]); n != 1 {
		t.Fatalf("h1: %d steps started, want only the one before the kill (its outcome read back)", n)
	}
	if rs.Hosts["h1"].Snapshot != "snap-h1" {
		t.Fatalf("h1's snapshot %q, want the one its cutover took", rs.Hosts["h1"].Snapshot)
	}
	if rem.uploads["h2"] == 0 || rem.runs["h2"] != "sha256:new" {
		t.Fatalf("h2: %d uploads, runs %s", rem.uploads["h2"], rem.runs["h2"])
	}
}

// TestRunnerRetriesAStepRefusedForAHeldLock: a host that refuses its
// cutover only because its mcpctl lock stayed held is tried again after a
// backoff, as a new step, not counted as failed; past the retries, or
// refused for another reason, it fails as before.
func TestRunnerRetriesAStepRefusedForAHeldLock(t *testing.T) {
	cases := []struct {
		name     string
		locked   int
		refuse   bool
		retries  int
		code     int
		outcome  Outcome
		cutovers int
	}{
		{name: "held twice, retried", locked: 2, retries: 3, code: 0, outcome: Verified, cutovers: 3},
		{name: "held past the retries", locked: 3, retries: 2, code: CodeMixed, outcome: Refused, cutovers: 3},
		{name: "refused for another reason", refuse: true, retries: 3, code: CodeMixed, outcome: Refused, cutovers: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rem := newScripted("sha256:new", "h1", "h2", "h3")
			rem.lockedCutovers["h2"], rem.refuseCutover["h2"] = tc.locked, tc.refuse
			r, _ := scriptedRunner(t, rem, Halt, 1)
			r.LockBackoff, r.LockRetries = time.Millisecond, tc.retries
			res := r.Run(context.Background(), r.plan(t, "sha256:new"))
			if res.Code != tc.code || res.Hosts["h2"] != tc.outcome {
				t.Fatalf("code %d hosts %v (%s), want %d with h2 %s", res.Code, res.Hosts, res.Message, tc.code, tc.outcome)
			}
			n := 0
			for _, id := range rem.started["h2"] {
				if strings.HasSuffix(id, "-cutover") {
					n++
				}
			}
			if n != tc.cutovers {
				t.Fatalf("h2: %d cutover steps, want %d (%v)", n, tc.cutovers, rem.started["h2"])
			}
		})
	}
}

func TestLockHeld(t *testing.T) {
	cases := []struct {
		name   string
		res    *StepResult
		holder string
		ok     bool
	}{
		{"holder named", &StepResult{State: StepDone, ExitCode: 1, Stderr: "log line\n" + `{"error":{"message":"m","exitCode":1,"lockHeld":{"path":"/s/lock","holder":{"pid":9,"owner":"watchdog"}}}}` + "\n"}, "pid 9 (watchdog)", true},
		{"holder unknown", &StepResult{State: StepDone, ExitCode: 1, Stderr: `{"error":{"exitCode":1,"lockHeld":{"path":"/s/lock","holder":null}}}`}, "/s/lock", true},
		{"other failure", &StepResult{State: StepDone, ExitCode: 1, Stderr: `{"error":{"message":"refused","exitCode":1}}`}, "", false},
		{"not the last line", &StepResult{State: StepDone, ExitCode: 1, Stderr: `{"error":{"lockHeld":{"path":"p"}}}` + "\nmcpctl: other\n"}, "", false},
		{"rolled back", &StepResult{State: StepDone, ExitCode: 3, Stderr: `{"error":{"exitCode":3,"lockHeld":{"path":"p"}}}`}, "", false},
		{"running", &StepResult{State: StepRunning}, "", false},
		{"nil", nil, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			holder, ok := LockHeld(tc.res)
			if holder != tc.holder || ok != tc.ok {
				t.Fatalf("LockHeld = %q, %v; want %q, %v", holder, ok, tc.holder, tc.ok)
			}
		})
	}
}

// TestObserveRereadsALockedHost: a host whose lock a short holder has at
// the moment its facts are read is read again; one held throughout is a
// problem of the plan.
func TestObserveRereadsALockedHost(t *testing.T) {
	for _, tc := range []struct {
		locked  int
		problem bool
	}{{1, false}, {2, false}, {3, true}} {
		rem := newScripted("sha256:new", "h1", "h2", "h3")
		rem.lockedFacts["h2"] = tc.locked
		r, _ := scriptedRunner(t, rem, Halt, 4)
		r.LockBackoff = time.Millisecond
		p := PlanRollout(r.Inv, r.Observe(context.Background()), "sha256:new", "v2", 1)
		if got := len(p.Problems) > 0; got != tc.problem {
			t.Fatalf("locked for %d reads: problems %v, want a problem: %v", tc.locked, p.Problems, tc.problem)
		}
	}
}
