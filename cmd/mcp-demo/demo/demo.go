// Package demo runs the main job end to end against a real systemd in a
// disposable container: first install of v1 with both tunnels and the
// watchdog, a canary of v2 under stress, a cutover with an armed rollback,
// an overload of production through a tunnel that restarts nothing, and a
// bad build whose cutover undoes itself. Every step runs mcpctl inside the
// container exactly as an operator would, and is judged by what the demo
// observes itself (unit identities over D-Bus, versions over MCP, files on
// disk), not by mcpctl's word alone.
//
// cmd/mcp-demo prints it for people; its end-to-end test runs the same Run
// with the output in a buffer.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/stress"
)

// Status is a step's outcome.
type Status string

// Step outcomes. SKIP is a step that did not run because an earlier one
// failed or the run was interrupted: it did not do what it should either.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Options configure Run.
type Options struct {
	// Out receives the human-readable run; io.Discard when nil.
	Out io.Writer
	// Color styles Out with lipgloss; plain ASCII when false.
	Color bool
	// ResultsDir receives the stress plots and survives the run; a new
	// directory under os.TempDir() when empty.
	ResultsDir string
	// CanaryStress and Overload are the attack durations of steps 2 and 4;
	// 5s and 3s when zero.
	CanaryStress, Overload time.Duration
	// ControlP99 is the bound both stress runs hold control calls' p99
	// to; mcpctl stress's own default (1s) when zero.
	ControlP99 time.Duration
	// Timed names stress checks of the overload step (step 4) whose
	// failure is shown but does not fail the step. What they measure
	// depends on the machine's speed, not only on the bounds: a test on a
	// shared machine sets them; an operator's run leaves them empty.
	Timed []string
}

// StepResult is one line of the summary.
type StepResult struct {
	Name   string        `json:"name"`
	Status Status        `json:"status"`
	Took   time.Duration `json:"took"`
	Detail string        `json:"detail,omitempty"`
}

// Identity is what proves a unit was not restarted.
type Identity struct {
	Unit         string `json:"unit"`
	ActiveState  string `json:"activeState"`
	MainPID      uint32 `json:"mainPID"`
	InvocationID string `json:"invocationID"`
	NRestarts    uint32 `json:"nRestarts"`
}

// Same reports whether a and b are the same running instance of a unit.
func (a Identity) Same(b Identity) bool {
	return a.Unit == b.Unit && a.ActiveState == "active" && b.ActiveState == "active" &&
		a.MainPID == b.MainPID && a.InvocationID == b.InvocationID && a.NRestarts == b.NRestarts
}

// Result is what the run did and observed; tests assert on it.
type Result struct {
	Steps      []StepResult `json:"steps"`
	ResultsDir string       `json:"resultsDir"`
	// Plots are the stress plots written into ResultsDir.
	CanaryPlot, OverloadPlot string

	// Step 1.
	InstalledVersion string
	// Step 2.
	CanaryVersion string
	CanaryStress  bool // the canary's stress verdict
	// Step 3.
	VersionAfterCutover string
	TunnelsCutover      [2][]Identity // before, after
	// SteadyCutover and SteadyBadCutover are the steady load through both
	// tunnels during the cutover (step 3) and the failed cutover with its
	// rollback (step 5).
	SteadyCutover, SteadyBadCutover *stress.SteadyCounts
	// Step 4.
	Overloaded         int // OVERLOADED answers through the tunnel
	OverloadIdentities [2][]Identity
	// Step 5.
	UngatedExit            int // cutover of v3 without --skip-canary-check
	BadCutoverExit         int
	VersionAfterBadCutover string
	CurrentAfterBadCutover string
	TunnelsBadCutover      [2][]Identity
	// Step 6: the fleet rollout's exit code and each host's current
	// release after it.
	FleetExit     int
	FleetVersions map[string]string
	FleetOutcomes map[string]fleet.Outcome
	// Step 7.
	Leftovers []string
}

// Passed reports whether every step did what it should.
func (r *Result) Passed() bool {
	if len(r.Steps) == 0 {
		return false
	}
	for _, s := range r.Steps {
		if s.Status != Pass {
			return false
		}
	}
	return true
}

// ExitCode is 0 when every step passed, else 1.
func (r *Result) ExitCode() int {
	if r.Passed() {
		return 0
	}
	return 1
}

// Unavailable says why this machine cannot run the demo, or "" when it can.
func Unavailable() string {
	if reason := nspawn.Unavailable(); reason != "" {
		return reason
	}
	if _, err := exec.LookPath("socat"); err != nil {
		return "socat not installed (it stands in for the tunnel programs; Debian: apt-get install socat, or `./task deps`)"
	}
	if reason := nspawn.SSHUnavailable(); reason != "" {
		return reason + " (the fleet step's hosts run sshd; `./task deps`)"
	}
	return ""
}

// step is one stage of the mission.
type step struct {
	name string
	run  func(ctx context.Context) error
}

// Run runs the whole mission and tears everything down, also when ctx is
// cancelled (SIGINT) or a step fails. It needs root, systemd-nspawn and
// socat (see Unavailable), and must run inside this Go module, where it
// builds mcpctl and mcp-backend.
func Run(ctx context.Context, opts Options) *Result {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.CanaryStress <= 0 {
		opts.CanaryStress = 5 * time.Second
	}
	if opts.Overload <= 0 {
		opts.Overload = 3 * time.Second
	}
	v := newView(opts.Out, opts.Color)
	res := &Result{}
	s := &site{opts: opts, v: v, res: res}
	start := time.Now()

	steps := []step{
		{"build mcpctl and mcp-backend v1, v2", s.build},
		{"boot a disposable systemd; first install of v1, both tunnels, the watchdog", s.install},
		{"canary v2 beside production, then stress it", s.canary},
		{"cutover to v2 with an armed rollback", s.cutover},
		{"overload production through a tunnel; nothing restarts", s.overload},
		{"bad candidate v3: the cutover rolls itself back", s.badCutover},
		{"fleet: v4 over SSH to three hosts in waves; it fails on one, the fleet undoes it", s.fleetStep},
	}
	total := len(steps) + 1 // and the teardown
	v.title("mcp-backend demo: the main job in a disposable systemd")
	if reason := Unavailable(); reason != "" {
		v.say("cannot run here: %s", reason)
		res.Steps = append(res.Steps, StepResult{Name: "preflight", Status: Fail, Detail: reason})
		return res
	}
	if err := s.prepare(); err != nil {
		v.say("%v", err)
		res.Steps = append(res.Steps, StepResult{Name: "preflight", Status: Fail, Detail: err.Error()})
		s.cleanupDirs()
		return res
	}
	v.say("work dir %s ($WORK, removed at the end), results in %s", s.work, res.ResultsDir)
	v.work = s.work

	failed := false
	for i, st := range steps {
		if failed || ctx.Err() != nil {
			why := "an earlier step failed"
			if ctx.Err() != nil {
				why = "interrupted"
			}
			res.Steps = append(res.Steps, StepResult{Name: st.name, Status: Skip, Detail: why})
			continue
		}
		v.step(i+1, total, st.name)
		t0 := time.Now()
		err := st.run(ctx)
		r := StepResult{Name: st.name, Status: Pass, Took: time.Since(t0)}
		if err != nil {
			r.Status, r.Detail, failed = Fail, err.Error(), true
			if ctx.Err() != nil {
				r.Detail = "interrupted: " + r.Detail
			}
		}
		v.verdict(r)
		res.Steps = append(res.Steps, r)
	}
	if failed && s.m != nil && ctx.Err() == nil {
		v.say("the container's journal and console, for the failure above:")
		v.block(s.m.Logs(context.Background()))
	}

	v.step(total, total, "teardown: the container, its cgroups, the tunnels, the work dir")
	t0 := time.Now()
	r := StepResult{Name: "teardown: nothing left running", Status: Pass}
	if err := s.teardown(); err != nil {
		r.Status, r.Detail = Fail, err.Error()
	}
	r.Took = time.Since(t0)
	v.verdict(r)
	res.Steps = append(res.Steps, r)

	v.summary(res.Steps, time.Since(start))
	for _, p := range []string{res.CanaryPlot, res.OverloadPlot} {
		if p != "" {
			v.say("latency plot: %s", p)
		}
	}
	if res.SteadyCutover != nil || res.SteadyBadCutover != nil {
		v.say("steady load through both tunnels (%g calls/s), cutover: %s", demoSteadyRate, steadyLine(res.SteadyCutover))
		v.say("steady load through both tunnels (%g calls/s), failed cutover and rollback: %s", demoSteadyRate, steadyLine(res.SteadyBadCutover))
	}
	if res.Passed() {
		fmt.Fprintln(opts.Out, "  "+v.pass.Render("demo PASS")+": every step did what it should")
	} else {
		fmt.Fprintln(opts.Out, "  "+v.fail.Render("demo FAIL"))
	}
	return res
}

// prepare makes the work and results directories.
func (s *site) prepare() error {
	work, err := os.MkdirTemp("", "mcp-demo-work-")
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	s.work = work
	if s.res.ResultsDir = s.opts.ResultsDir; s.res.ResultsDir == "" {
		s.res.ResultsDir = filepath.Join(os.TempDir(), "mcp-demo-results-"+time.Now().Format("20060102-150405"))
	}
	abs, err := filepath.Abs(s.res.ResultsDir)
	if err != nil {
		return fmt.Errorf("results dir %q: %w", s.res.ResultsDir, err)
	}
	s.res.ResultsDir = abs
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("results dir: %w", err)
	}
	return nil
}

func (s *site) cleanupDirs() {
	if s.work != "" {
		_ = os.RemoveAll(s.work)
	}
}
