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
}

func newScripted(build string, hosts ...string) *scripted {
	s := &scripted{runs: map[string]string{}, failCutover: map[string]bool{}, started: map[string][]string{},
		results: map[string]*StepResult{}, uploads: map[string]int{}, build: build}
	for _, h := range hosts {
		s.runs[h] = "sha256:old"
	}
	return s
}

func (s *scripted) Facts(_ context.Context, h *Host) (*Facts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Facts{MachineID: "m-" + h.Name, Version: "v", Digest: s.runs[h.Name], Healthy: true, DiskFree: 1 << 40}, nil
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
