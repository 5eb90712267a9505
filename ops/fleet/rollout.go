package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Exit codes of the fleet commands beyond mcpctl's own 0-4 (0: every host
// runs the build verified; 1: refused or failed before any host changed;
// 2: usage or inventory error; 4: a host or a revert needs a human).
const (
	// CodeReverted: a wave failed beyond rollout.maxFailures and every host
	// this run cut over was rolled back: the fleet is as it was.
	CodeReverted = 5
	// CodeMixed: the run halted (onFailure halt, or failures within
	// maxFailures): hosts run different builds; resume or roll back.
	CodeMixed = 6
)

// ErrUnreachable marks a host the SSH transport could not reach (refused,
// timed out, unknown or changed host key).
var ErrUnreachable = errors.New("unreachable")

// StepResult is a remote step's outcome as its host recorded it.
type StepResult struct {
	ID string `json:"id"`
	// State: "done" (ExitCode is the step's), "running" (not yet), or
	// "absent" (the host never started it).
	State    string    `json:"state"`
	ExitCode int       `json:"exitCode"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	Stdout   string    `json:"stdout,omitempty"`
	Stderr   string    `json:"stderr,omitempty"`
}

// Step states.
const (
	StepDone    = "done"
	StepRunning = "running"
	StepAbsent  = "absent"
)

// Remote is how the fleet reaches a host (ops/fleet/sshrun over OpenSSH).
// Errors reaching the host wrap ErrUnreachable.
type Remote interface {
	// Facts reads the host's facts; it changes nothing.
	Facts(ctx context.Context, h *Host) (*Facts, error)
	// Upload sends the local file (sha256 digest "sha256:HEX") to the host,
	// which checks it and keeps it under a stable content-addressed path,
	// returned.
	Upload(ctx context.Context, h *Host, local, digest string) (string, error)
	// Start starts `agent ARGS...` on the host detached from the
	// connection, as step id; starting a step that exists does nothing.
	Start(ctx context.Context, h *Host, agent, id string, args []string) error
	// Wait returns the step's outcome, or State running after at most
	// about poll.
	Wait(ctx context.Context, h *Host, agent, id string, poll time.Duration) (*StepResult, error)
}

// Runner applies rollouts, resumes and reverts through Remote, writing
// every step to the run log before it starts.
type Runner struct {
	Inv    *Inventory
	Remote Remote
	Log    *RunLog
	// Emit receives every event as it is logged (the live table, --json).
	Emit   func(Event)
	Logger *slog.Logger
	// Self is this mcpctl, uploaded to every host to run its steps there;
	// SelfDigest its sha256.
	Self, SelfDigest string
	// Poll is the longest a single remote wait blocks; 20s when zero.
	Poll time.Duration
	// UnreachableAfter is how long a host may stay unreachable during a
	// step before it counts as failed; 3 x ssh.connectTimeout when zero.
	UnreachableAfter time.Duration
	// LockBackoff is the first pause before a step the host refused
	// because its mcpctl lock stayed held (or a host whose facts say it is
	// held) is tried again, doubling each time; DefaultLockBackoff when
	// zero. LockRetries bounds the retries; DefaultLockRetries when zero.
	LockBackoff time.Duration
	LockRetries int
}

// Defaults of Runner.LockBackoff and Runner.LockRetries: a host's own
// mcpctl already waits for a short holder (--lock-wait); these outlast a
// longer one (a snapshot, an operator's canary stop) without halting the
// rollout.
const (
	DefaultLockBackoff = 5 * time.Second
	DefaultLockRetries = 4
)

// lockRetry returns the pause before retry number n (0-based) of a step
// refused for a held lock, and false when no retry is left.
func (r *Runner) lockRetry(n int) (time.Duration, bool) {
	retries, backoff := r.LockRetries, r.LockBackoff
	if retries <= 0 {
		retries = DefaultLockRetries
	}
	if backoff <= 0 {
		backoff = DefaultLockBackoff
	}
	if n >= retries {
		return 0, false
	}
	return backoff << n, true
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// LockHeld reports whether a finished step failed only because the host's
// mcpctl lock stayed held past its --lock-wait: mcpctl --json then ends
// stderr with {"error":{...,"lockHeld":{...}}} and exits 1, nothing
// changed. The holder is returned for the log.
func LockHeld(res *StepResult) (holder string, ok bool) {
	if res == nil || res.State != StepDone || res.ExitCode != outcome.Failed {
		return "", false
	}
	s := strings.TrimSpace(res.Stderr)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	var e outcome.Failure
	if json.Unmarshal([]byte(s), &e) != nil || e.Error.LockHeld == nil {
		return "", false
	}
	if h := e.Error.LockHeld.Holder; h != nil {
		return fmt.Sprintf("pid %d (%s)", h.PID, h.Owner), true
	}
	return e.Error.LockHeld.Path, true
}

// Result is how a run ended.
type Result struct {
	Run      string             `json:"run"`
	Code     int                `json:"code"`
	Hosts    map[string]Outcome `json:"hosts"`
	Message  string             `json:"message"`
	Commands []string           `json:"commands,omitempty"`
}

func (r *Runner) emit(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	err := r.Log.Append(e)
	if r.Emit != nil {
		r.Emit(e)
	}
	return err
}

// NewRunID is a fresh run id: time and randomness, safe in any file or
// unit name.
func NewRunID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "r" + now.UTC().Format("20060102t150405") + "-" + hex.EncodeToString(b[:])
}

// Observe reads every host's facts in parallel (up to parallelism). A host
// whose mcpctl lock is held (a watchdog round, a snapshot) is read again
// after a backoff: a short holder is not a problem of the plan.
func (r *Runner) Observe(ctx context.Context) map[string]Observed {
	out := map[string]Observed{}
	var mu sync.Mutex
	r.each(ctx, hostNames(r.Inv), func(name string) {
		h, _ := r.Inv.Host(name)
		f, err := r.Remote.Facts(ctx, h)
		// Two retries at most: a host a cutover holds is a problem to report.
		for n := 0; n < 2 && err == nil && f != nil && f.Locked != ""; n++ {
			pause, ok := r.lockRetry(n)
			if !ok || sleep(ctx, pause) != nil {
				break
			}
			r.logger().Info("host lock held, reading its facts again", "host", name, "holder", f.Locked, "after", pause)
			f, err = r.Remote.Facts(ctx, h)
		}
		mu.Lock()
		out[name] = Observed{Facts: f, Err: err}
		mu.Unlock()
	})
	return out
}

func hostNames(inv *Inventory) []string {
	out := make([]string, len(inv.Hosts))
	for i, h := range inv.Hosts {
		out[i] = h.Name
	}
	return out
}

// each runs f for every name, at most rollout.parallelism at once.
func (r *Runner) each(ctx context.Context, names []string, f func(string)) {
	r.eachUntil(ctx, names, func() bool { return false }, f)
}

// eachUntil is each that starts no further name once stop says so.
func (r *Runner) eachUntil(ctx context.Context, names []string, stop func() bool, f func(string)) {
	sem := make(chan struct{}, r.Inv.Rollout.Parallelism)
	var wg sync.WaitGroup
	for _, n := range names {
		sem <- struct{}{}
		if ctx.Err() != nil || stop() {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(n)
		}()
	}
	wg.Wait()
}

// Start logs a new run of the build after the plan had no problems.
func (r *Runner) Start(plan *Plan, runID, build string) (*RunState, error) {
	pol := r.Inv.Rollout
	e := Event{Run: runID, Type: EvRunStart, Build: build, Digest: plan.Digest, Version: plan.Version, Waves: plan.Waves, Policy: &pol}
	if err := r.emit(e); err != nil {
		return nil, err
	}
	rs := LastRun([]Event{e})
	for _, hp := range plan.Hosts {
		if hp.Skip {
			rs.Hosts[hp.Host].Outcome = Skipped
			if err := r.emit(Event{Run: runID, Type: EvHostEnd, Wave: hp.Wave, Host: hp.Host, Outcome: Skipped, Detail: "already on " + short(plan.Digest) + ", verified"}); err != nil {
				return nil, err
			}
		}
	}
	return rs, nil
}

// Run drives the waves of rs that are not done yet: every host of a wave
// (those not already verified) in parallel, then the decision. It ends by
// logging run-end with the code.
func (r *Runner) Run(ctx context.Context, rs *RunState) *Result {
	run := rs.Start.Run
	for i, w := range rs.Start.Waves {
		todo := []string{}
		for _, h := range w.Hosts {
			if !rs.Hosts[h].Outcome.OK() {
				todo = append(todo, h)
			}
		}
		if len(todo) == 0 {
			continue
		}
		if i > 0 && r.Inv.Rollout.Pause.D() > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(r.Inv.Rollout.Pause.D()):
			}
		}
		if ctx.Err() != nil {
			return r.interrupted(rs)
		}
		_ = r.emit(Event{Run: run, Type: EvWaveStart, Wave: w.Index, Detail: strings.Join(todo, ",")})
		// Once the wave has failed beyond maxFailures, none of its hosts
		// not yet started starts: they would only be taken back.
		var mu sync.Mutex
		failed := 0
		for _, h := range todo {
			rs.Hosts[h].Outcome = ""
		}
		r.eachUntil(ctx, todo, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return failed > r.Inv.Rollout.MaxFailures
		}, func(name string) {
			o := r.host(ctx, rs, name)
			mu.Lock()
			rs.Hosts[name].Outcome = o
			if !o.OK() {
				failed++
			}
			mu.Unlock()
		})
		if ctx.Err() != nil {
			return r.interrupted(rs)
		}
		outcomes := map[string]Outcome{}
		for _, h := range w.Hosts {
			outcomes[h] = rs.Hosts[h].Outcome
		}
		d, failed := DecideWave(r.Inv.Rollout, outcomes)
		if n := notStarted(todo, outcomes); n > 0 {
			_ = r.emit(Event{Run: run, Type: EvWaveEnd, Wave: w.Index, Decision: d, Detail: fmt.Sprintf("%d of %d failed (maxFailures %d); %d not started", failed, len(w.Hosts), r.Inv.Rollout.MaxFailures, n)})
		} else {
			_ = r.emit(Event{Run: run, Type: EvWaveEnd, Wave: w.Index, Decision: d, Detail: fmt.Sprintf("%d of %d failed (maxFailures %d)", failed, len(w.Hosts), r.Inv.Rollout.MaxFailures)})
		}
		switch d {
		case RevertRun:
			return r.Revert(ctx, rs, fmt.Sprintf("wave %d: %d of %d hosts failed", w.Index, failed, len(w.Hosts)))
		case HaltRun:
			return r.end(rs, CodeMixed, fmt.Sprintf("halted after wave %d: %d of %d hosts failed; hosts run different builds", w.Index, failed, len(w.Hosts)), r.nextCommands())
		}
	}
	for _, h := range rs.Hosts {
		if !h.Outcome.OK() {
			return r.end(rs, CodeMixed, "every wave ran, some hosts failed within rollout.maxFailures: hosts run different builds", r.nextCommands())
		}
	}
	return r.end(rs, 0, "every host runs "+rs.Start.Version+" ("+short(rs.Start.Digest)+"), verified", nil)
}

func notStarted(todo []string, outcomes map[string]Outcome) int {
	n := 0
	for _, h := range todo {
		if outcomes[h] == "" {
			n++
		}
	}
	return n
}

func (r *Runner) nextCommands() []string {
	return []string{
		"mcpctl fleet resume --inventory " + r.Inv.Path,
		"mcpctl fleet rollback --inventory " + r.Inv.Path,
	}
}

func (r *Runner) interrupted(rs *RunState) *Result {
	res := r.result(rs, 1, "interrupted: the steps already started go on on their hosts (each cutover under its own armed rollback); run `mcpctl fleet resume` to finish or `mcpctl fleet rollback` to undo")
	res.Commands = r.nextCommands()
	return res
}

func (r *Runner) result(rs *RunState, code int, msg string) *Result {
	res := &Result{Run: rs.Start.Run, Code: code, Message: msg, Hosts: map[string]Outcome{}}
	for n, h := range rs.Hosts {
		res.Hosts[n] = h.Outcome
	}
	return res
}

func (r *Runner) end(rs *RunState, code int, msg string, cmds []string) *Result {
	c := code
	_ = r.emit(Event{Run: rs.Start.Run, Type: EvRunEnd, Code: &c, Detail: msg})
	res := r.result(rs, code, msg)
	res.Commands = cmds
	return res
}

// hostCtx is one host's part of a run.
type hostCtx struct {
	r    *Runner
	rs   *RunState
	h    *Host
	rec  *HostRecord
	wave int
	from string // the version the host ran when this run reached it
}

func (r *Runner) host(ctx context.Context, rs *RunState, name string) Outcome {
	h, _ := r.Inv.Host(name)
	hc := &hostCtx{r: r, rs: rs, h: h, rec: rs.Hosts[name], wave: rs.Hosts[name].Wave}
	o, snap, from, detail := hc.rollout(ctx)
	_ = r.emit(Event{Run: rs.Start.Run, Type: EvHostEnd, Wave: hc.wave, Host: name, Outcome: o, Snapshot: snap, From: from, Detail: detail})
	if snap != "" {
		hc.rec.Snapshot, hc.rec.From = snap, from
	}
	return o
}

// ctlArgs are the arguments of the host's mcpctl for one step.
func (hc *hostCtx) ctlArgs(args ...string) []string {
	return append([]string{"--config", hc.h.Config, "--json", "--no-color"}, args...)
}

// rollout is one host: a step a dead controller left open is read first;
// a host already on the build is done; else upload, canary, stress,
// cutover with its armed rollback.
func (hc *hostCtx) rollout(ctx context.Context) (o Outcome, snapshot, from, detail string) {
	digest, version := hc.rs.Start.Digest, hc.rs.Start.Version
	// An upload is not a detached step: one cut short is simply redone.
	if open := hc.rec.Open; open != nil && strings.HasPrefix(open.Step, "upload") {
		hc.rec.Open = nil
	}
	if open := hc.rec.Open; open != nil {
		res, err := hc.await(ctx, hc.agentOf(open), open.Step, open.StepID)
		hc.rec.Open = nil
		if err != nil {
			return Unreachable, "", "", fmt.Sprintf("%s %s left open by an earlier controller: %v", open.Step, open.StepID, err)
		}
		if open.Step == "cutover" && res.State == StepDone {
			o, snapshot, from, detail = cutoverOutcome(res)
			if o == Verified {
				return o, snapshot, from, detail
			}
		}
	}
	f, err := hc.r.Remote.Facts(ctx, hc.h)
	if err != nil {
		return Unreachable, "", "", err.Error()
	}
	if f.On(digest) {
		if hc.rec.Snapshot != "" {
			return Verified, hc.rec.Snapshot, hc.rec.From, "already cut over by this run"
		}
		return Skipped, "", "", "already on the build, verified"
	}
	if f.Pending != nil {
		return Refused, "", "", fmt.Sprintf("a cutover to %s is pending there (snapshot %s)", f.Pending.ToVersion, f.Pending.SnapshotID)
	}
	hc.from = f.Version
	agent, err := hc.upload(ctx, hc.r.Self, hc.r.SelfDigest, "upload-mcpctl")
	if err != nil {
		return Unreachable, "", "", err.Error()
	}
	build, err := hc.upload(ctx, hc.rs.Start.Build, digest, "upload-build")
	if err != nil {
		if errors.Is(err, ErrUnreachable) {
			return Unreachable, "", "", err.Error()
		}
		return Refused, "", "", err.Error()
	}
	vargs := []string{"--build", build}
	if version != "" {
		vargs = append(vargs, "--version", version)
	}
	pol := hc.r.Inv.Rollout.Stress
	steps := []struct {
		name string
		args []string
	}{
		{"canary", hc.ctlArgs(append([]string{"canary", "start"}, vargs...)...)},
		{"stress", hc.ctlArgs(append([]string{"stress"}, pol.Args()...)...)},
	}
	for _, s := range steps {
		res, err := hc.step(ctx, agent, s.name, s.args)
		if err != nil {
			hc.stopCanary(ctx, agent)
			return Unreachable, "", "", err.Error()
		}
		if res.State != StepDone || res.ExitCode != 0 {
			hc.stopCanary(ctx, agent)
			return Refused, "", "", fmt.Sprintf("%s failed (exit %d): %s", s.name, res.ExitCode, tail(res.Stderr))
		}
	}
	hc.stopCanary(ctx, agent)
	res, err := hc.step(ctx, agent, "cutover", hc.ctlArgs(append([]string{"cutover"}, append(vargs, "--arm-rollback")...)...))
	if err != nil {
		return Unreachable, "", "", err.Error() + "; the host's armed rollback decides what it ends on"
	}
	return cutoverOutcome(res)
}

func (hc *hostCtx) stopCanary(ctx context.Context, agent string) {
	_, _ = hc.step(ctx, agent, "canary-stop", hc.ctlArgs("canary", "stop"))
}

// agentOf is the mcpctl an open step was started with (its first word).
func (hc *hostCtx) agentOf(e *Event) string {
	if a, _, ok := strings.Cut(e.Detail, " "); ok {
		return a
	}
	return e.Detail
}

func cutoverOutcome(res *StepResult) (Outcome, string, string, string) {
	var rep outcome.Cutover
	_ = json.Unmarshal([]byte(res.Stdout), &rep)
	reasons := strings.Join(append(rep.Refusals, rep.Failures...), "; ")
	switch {
	case res.State != StepDone:
		return Refused, "", "", "the cutover never started on the host"
	case res.ExitCode == outcome.OK:
		return Verified, rep.SnapshotID, rep.FromVersion, "cut over from " + rep.FromVersion + ", verified"
	case res.ExitCode == outcome.RolledBack:
		return RolledBack, "", "", "failed verification, the host rolled itself back: " + reasons
	case res.ExitCode == outcome.RollbackFailed:
		return HumanNeeded, "", "", "the host's rollback failed: " + reasons + " " + tail(res.Stderr)
	}
	return Refused, "", "", fmt.Sprintf("cutover refused (exit %d): %s %s", res.ExitCode, reasons, tail(res.Stderr))
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}

func (hc *hostCtx) upload(ctx context.Context, local, digest, step string) (string, error) {
	id := hc.nextID(step)
	_ = hc.r.emit(Event{Run: hc.rs.Start.Run, Type: EvStepStart, Wave: hc.wave, Host: hc.h.Name, Step: step, StepID: id, Digest: digest, From: hc.from})
	p, err := hc.r.Remote.Upload(ctx, hc.h, local, digest)
	e := Event{Run: hc.rs.Start.Run, Type: EvStepEnd, Wave: hc.wave, Host: hc.h.Name, Step: step, StepID: id, Detail: p}
	code := 0
	if err != nil {
		code, e.Detail = 1, err.Error()
	}
	e.ExitCode = &code
	_ = hc.r.emit(e)
	return p, err
}

func (hc *hostCtx) nextID(step string) string {
	hc.rec.Steps++
	return fmt.Sprintf("%s-%s-%d-%s", hc.rs.Start.Run, hc.h.Name, hc.rec.Steps, step)
}

// step runs one detached step on the host (see stepOnce); a step the host
// refused only because its mcpctl lock stayed held is run again after a
// backoff, as a new step, rather than failing the host.
func (hc *hostCtx) step(ctx context.Context, agent, name string, args []string) (*StepResult, error) {
	for n := 0; ; n++ {
		res, err := hc.stepOnce(ctx, agent, name, args)
		holder, locked := LockHeld(res)
		if err != nil || !locked {
			return res, err
		}
		pause, ok := hc.r.lockRetry(n)
		if !ok {
			return res, nil
		}
		hc.r.logger().Info("host lock held, retrying the step", "host", hc.h.Name, "step", name, "holder", holder, "after", pause)
		if err := sleep(ctx, pause); err != nil {
			return nil, err
		}
	}
}

// stepOnce starts one detached step on the host and waits for its outcome.
// The step-start event is durable before the step starts, so a controller
// killed at any point leaves a log that names it.
func (hc *hostCtx) stepOnce(ctx context.Context, agent, name string, args []string) (*StepResult, error) {
	id := hc.nextID(name)
	if err := hc.r.emit(Event{Run: hc.rs.Start.Run, Type: EvStepStart, Wave: hc.wave, Host: hc.h.Name, Step: name, StepID: id, Detail: agent + " " + strings.Join(args, " ")}); err != nil {
		return nil, err
	}
	if err := hc.r.Remote.Start(ctx, hc.h, agent, id, args); err != nil {
		hc.endStep(name, id, nil, err)
		return nil, err
	}
	return hc.await(ctx, agent, name, id)
}

// await waits for a step's outcome on the host, across dropped
// connections, for at most rollout.stepTimeout; a host unreachable for
// UnreachableAfter in a row is given up on.
func (hc *hostCtx) await(ctx context.Context, agent, name, id string) (*StepResult, error) {
	poll := hc.r.Poll
	if poll <= 0 {
		poll = 20 * time.Second
	}
	giveUp := hc.r.UnreachableAfter
	if giveUp <= 0 {
		giveUp = 3 * hc.r.Inv.SSH.ConnectTimeout.D()
	}
	deadline := time.Now().Add(hc.r.Inv.Rollout.StepTimeout.D())
	var downSince time.Time
	for {
		res, err := hc.r.Remote.Wait(ctx, hc.h, agent, id, poll)
		switch {
		case err == nil && res.State != StepRunning:
			hc.endStep(name, id, res, nil)
			return res, nil
		case err == nil:
			downSince = time.Time{}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, ErrUnreachable):
			if downSince.IsZero() {
				downSince = time.Now()
			}
			if time.Since(downSince) >= giveUp {
				err = fmt.Errorf("%s %s: host unreachable for %s: %w", name, id, giveUp, err)
				hc.endStep(name, id, nil, err)
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		default:
			hc.endStep(name, id, nil, err)
			return nil, err
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("%s %s: no outcome within rollout.stepTimeout %s: %w", name, id, hc.r.Inv.Rollout.StepTimeout, ErrUnreachable)
			hc.endStep(name, id, nil, err)
			return nil, err
		}
	}
}

func (hc *hostCtx) endStep(name, id string, res *StepResult, err error) {
	e := Event{Run: hc.rs.Start.Run, Type: EvStepEnd, Wave: hc.wave, Host: hc.h.Name, Step: name, StepID: id}
	switch {
	case err != nil:
		e.Detail = err.Error()
	case res != nil:
		if res.State == StepDone {
			c := res.ExitCode
			e.ExitCode = &c
		}
		e.HostStart, e.HostEnd = res.Started, res.Ended
		e.Detail = res.State
		if name == "cutover" && res.State == StepDone && res.ExitCode == 0 {
			_, e.Snapshot, e.From, _ = cutoverOutcome(res)
		}
	}
	_ = hc.r.emit(e)
}

// Revert rolls back every host the run cut over (newest wave first, a
// wave's hosts in parallel) to the snapshot its cutover took there.
func (r *Runner) Revert(ctx context.Context, rs *RunState, why string) *Result {
	run := rs.Start.Run
	_ = r.emit(Event{Run: run, Type: EvRevertStart, Detail: why})
	// A cutover a dead controller left open may have verified: read its
	// outcome from the host first, so that its snapshot is reverted too.
	var mu sync.Mutex
	r.each(ctx, hostNames(r.Inv), func(name string) {
		rec := rs.Hosts[name]
		if rec.Open == nil || rec.Open.Step != "cutover" {
			return
		}
		h, _ := r.Inv.Host(name)
		hc := &hostCtx{r: r, rs: rs, h: h, rec: rec, wave: rec.Wave}
		res, err := hc.await(ctx, hc.agentOf(rec.Open), rec.Open.Step, rec.Open.StepID)
		mu.Lock()
		defer mu.Unlock()
		rec.Open = nil
		if err != nil {
			rec.Outcome = Unreachable
			return
		}
		o, snap, from, _ := cutoverOutcome(res)
		rec.Outcome = o
		if snap != "" {
			rec.Snapshot, rec.From = snap, from
		}
	})
	targets := RevertOrder(rs)
	byWave := map[int][]RevertTarget{}
	var waves []int
	for _, t := range targets {
		if byWave[t.Wave] == nil {
			waves = append(waves, t.Wave)
		}
		byWave[t.Wave] = append(byWave[t.Wave], t)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(waves)))
	var problems []string
	for _, w := range waves {
		names := []string{}
		snap := map[string]string{}
		for _, t := range byWave[w] {
			names = append(names, t.Host)
			snap[t.Host] = t.Snapshot
		}
		r.each(ctx, names, func(name string) {
			h, _ := r.Inv.Host(name)
			hc := &hostCtx{r: r, rs: rs, h: h, rec: rs.Hosts[name], wave: w}
			o, detail := hc.revert(ctx, snap[name])
			_ = r.emit(Event{Run: run, Type: EvRevertHost, Wave: w, Host: name, Outcome: o, Snapshot: snap[name], Detail: detail})
			mu.Lock()
			defer mu.Unlock()
			if o == Reverted {
				rs.Hosts[name].Outcome = Reverted
			} else {
				problems = append(problems, name+": "+detail)
			}
		})
	}
	for _, n := range hostNames(r.Inv) {
		if o := rs.Hosts[n].Outcome; o == Unreachable || o == HumanNeeded {
			problems = append(problems, fmt.Sprintf("%s: %s, its state is not known to be the old one", n, o))
		}
	}
	if len(problems) > 0 {
		return r.end(rs, 4, "revert incomplete, a human is needed: "+strings.Join(problems, "; "),
			[]string{"mcpctl fleet status --inventory " + r.Inv.Path, "mcpctl fleet rollback --inventory " + r.Inv.Path})
	}
	return r.end(rs, CodeReverted, why+"; every host this run cut over was rolled back ("+strconv.Itoa(len(targets))+"): the fleet is as it was", nil)
}

func (hc *hostCtx) revert(ctx context.Context, snapshot string) (Outcome, string) {
	agent, err := hc.upload(ctx, hc.r.Self, hc.r.SelfDigest, "upload-mcpctl")
	if err != nil {
		return Unreachable, err.Error()
	}
	res, err := hc.step(ctx, agent, "rollback", hc.ctlArgs("rollback", "--snapshot", snapshot))
	if err != nil {
		return Unreachable, err.Error()
	}
	if res.State != StepDone || res.ExitCode != 0 {
		return HumanNeeded, fmt.Sprintf("rollback --snapshot %s exit %d: %s", snapshot, res.ExitCode, tail(res.Stderr))
	}
	return Reverted, "rolled back to snapshot " + snapshot
}

// ResumeState prepares the last run in the log for resuming: nil and a
// message when there is nothing to resume.
func ResumeState(events []Event) (*RunState, error) {
	rs := LastRun(events)
	if rs == nil {
		return nil, errors.New("the run log holds no run: start one with `mcpctl fleet rollout`")
	}
	switch c := rs.Code(); {
	case rs.Revert && c >= 0:
		return nil, fmt.Errorf("run %s was reverted (exit %d): start a new rollout", rs.Start.Run, c)
	case c == 0:
		return nil, fmt.Errorf("run %s finished: every host runs %s", rs.Start.Run, rs.Start.Version)
	}
	return rs, nil
}

// CheckBuild verifies the run's build file still has the run's digest.
func CheckBuild(rs *RunState, digestOf func(string) (string, error)) error {
	d, err := digestOf(rs.Start.Build)
	if err != nil {
		return fmt.Errorf("run %s: build %s: %w", rs.Start.Run, rs.Start.Build, err)
	}
	if d != rs.Start.Digest {
		return fmt.Errorf("run %s: build %s is now %s, the run rolled out %s: put the run's build back or start a new rollout", rs.Start.Run, rs.Start.Build, short(d), short(rs.Start.Digest))
	}
	if _, err := os.Stat(rs.Start.Build); err != nil {
		return err
	}
	return nil
}
