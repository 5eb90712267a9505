package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// A production slot is one instance of the slot template (see units.Slots);
// both take the backend socket's descriptors, so a new build starts beside
// the old one, is verified on a loopback listener of its own, and only then
// takes over the shared socket while the old one finishes what it accepted.
// An installation older than the slots runs the single legacy unit
// (Backend.Unit); its first cutover or `mcpctl unit install` moves it to a
// slot the same way.

// SlotFact is one production unit as observed: a slot, or the legacy unit.
type SlotFact struct {
	Unit string
	// Slot is "" for the legacy unit.
	Slot         string
	ActiveState  string
	StatusText   string
	MainPID      uint32
	InvocationID string
	// Release is the release its process runs (from its executable), or
	// else the one its link names; "" when unknown.
	Release string
	// OwnPort marks a legacy unit installed before the socket unit: it
	// binds the port itself (the socket is not listening), so no slot can
	// start beside it.
	OwnPort bool
}

// Running reports a unit with a process (starting, serving or stopping).
func (f SlotFact) Running() bool { return unitstate.Running(f.ActiveState) }

// Accepting reports a unit that takes connections from the shared socket:
// a running legacy unit, or a slot that said so (a slot that says nothing
// runs a build older than the slots, which accepts at once).
func (f SlotFact) Accepting() bool {
	if !f.Running() || f.ActiveState == "deactivating" {
		return false
	}
	switch f.StatusText {
	case mcpwire.SlotStandby, mcpwire.SlotHandingOff:
		return false
	}
	return !parkedText(f.StatusText)
}

// Parked reports a slot that handed off and waits, able to accept again at
// once (SIGUSR1): the old release's process until its cutover is confirmed.
// It may still be finishing calls it accepted before the handoff.
func (f SlotFact) Parked() bool {
	return f.Running() && f.ActiveState != "deactivating" && parkedText(f.StatusText)
}

// parkedText reports a slot status that says parked: all its calls
// answered (mcpwire.SlotParked), or some accepted before the handoff still
// running (mcpwire.SlotParkedFinishing). Either takes over again at once.
func parkedText(s string) bool {
	return s == mcpwire.SlotParked || s == mcpwire.SlotParkedFinishing
}

// SlotPlan is the decision of PlanSlots: how production comes to run the
// target release in exactly one slot.
type SlotPlan struct {
	// Keep is the unit that already serves the target release (nothing to
	// start); "" when a slot must be started.
	Keep string
	// Resume is a parked unit that runs the target release: it accepts
	// again at once (nothing to start); "" when none.
	Resume string
	// StopFirst are units to stop before anything starts (a standby or a
	// handing-off slot left by an interrupted run, in the slot to use).
	StopFirst []string
	// Start is the slot to start with the target release, StartUnit its
	// unit; Standby says it starts in standby beside the serving Old.
	Start, StartUnit string
	Standby          bool
	// Old are the units that accept now and hand off to the new slot (or
	// to Keep); Legacy names the legacy unit among them or left over.
	Old    []SlotFact
	Legacy string
	// Refusal is set when no plan keeps production serving.
	Refusal string
}

// PlanSlots decides how production comes to run release target in exactly
// one slot without a moment where nothing accepts: keep a slot that already
// runs it (and hand the others off to it), else resume a parked one that
// runs it (a rollback before the cutover was confirmed), else start an idle
// slot beside whatever accepts now.
func PlanSlots(service string, facts []SlotFact, target string) SlotPlan {
	var p SlotPlan
	var accepting, idle []SlotFact
	for _, f := range facts {
		if f.Slot == "" && (f.Running() || f.ActiveState == "failed") {
			p.Legacy = f.Unit
		}
		switch {
		case f.Slot == "" && f.OwnPort && f.Running():
			// It holds the port the socket needs: it stops before the
			// slot starts (the one move with a gap, done once).
			p.StopFirst = append(p.StopFirst, f.Unit)
		case f.Accepting():
			accepting = append(accepting, f)
		case f.Parked() && f.Release == target && f.Release != "" && p.Resume == "":
			p.Resume = f.Unit
		case f.Running():
			// Standby or handing off: a leftover of an interrupted run.
			p.StopFirst = append(p.StopFirst, f.Unit)
			if f.Slot != "" {
				idle = append(idle, f)
			}
		case f.Slot != "":
			idle = append(idle, f)
		}
	}
	for _, f := range accepting {
		if f.Release == target && f.Release != "" && p.Keep == "" {
			p.Keep = f.Unit
			continue
		}
		p.Old = append(p.Old, f)
	}
	if p.Keep != "" && p.Resume != "" {
		// Two processes of the target: the one accepting stays.
		p.StopFirst = append(p.StopFirst, p.Resume)
		p.Resume = ""
	}
	if p.Keep != "" || p.Resume != "" {
		return p
	}
	if len(idle) == 0 {
		p.Refusal = fmt.Sprintf("both slots of %s accept and neither runs %s: run `mcpctl status` and `mcpctl rollback --last`", service, target)
		return p
	}
	// Prefer a slot that is not running at all over one to stop first.
	pick := idle[0]
	for _, f := range idle {
		if !f.Running() {
			pick = f
			break
		}
	}
	p.Start, p.StartUnit, p.Standby = pick.Slot, pick.Unit, len(p.Old) > 0
	return p
}

// serving is the unit that accepts production's connections now: the one
// accepting slot or legacy unit; "" when none or several do.
func serving(facts []SlotFact) *SlotFact {
	var out *SlotFact
	for i := range facts {
		if facts[i].Accepting() {
			if out != nil {
				return nil
			}
			out = &facts[i]
		}
	}
	return out
}

// UnitReader reads one unit's state (the systemd client does).
type UnitReader interface {
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
}

// ProductionFacts observes service's legacy unit (only when loaded) and
// both of its slots, without the releases they run.
func ProductionFacts(ctx context.Context, sd UnitReader, service string) ([]SlotFact, error) {
	names := []string{service}
	for _, s := range units.Slots {
		names = append(names, units.SlotUnit(service, s))
	}
	sock, err := sd.Unit(ctx, units.Socket(service))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", units.Socket(service), err)
	}
	var out []SlotFact
	for _, n := range names {
		st, err := sd.Unit(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", n, err)
		}
		f := SlotFact{Unit: n, Slot: units.SlotOf(service, n), ActiveState: st.ActiveState, StatusText: st.StatusText,
			MainPID: st.MainPID, InvocationID: st.InvocationID}
		if f.Slot == "" && !loaded(st) {
			continue
		}
		f.OwnPort = f.Slot == "" && sock.ActiveState != "active"
		out = append(out, f)
	}
	return out, nil
}

// ServingUnit is the unit of service that accepts production's
// connections now (a slot, or the legacy unit); the boot slot's unit when
// none or several accept, or when they cannot be read.
func ServingUnit(ctx context.Context, sd UnitReader, service string) string {
	facts, err := ProductionFacts(ctx, sd, service)
	if err != nil {
		facts = nil
	}
	return ServingOf(facts, service)
}

// ServingOf is ServingUnit over facts already read: the one unit that
// accepts, else the boot slot.
func ServingOf(facts []SlotFact, service string) string {
	if s := serving(facts); s != nil {
		return s.Unit
	}
	return units.SlotUnit(service, units.BootSlot)
}

// slotFacts observes the legacy unit and both slots, with the release each
// runs.
func (e *Env) slotFacts(ctx context.Context) ([]SlotFact, error) {
	out, err := ProductionFacts(ctx, e.Systemd, e.Config.Backend.Unit)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Release = e.releaseOf(out[i])
	}
	return out, nil
}

// releaseOf is the release f's process runs: its executable's release
// directory, or, without a process, what its link (the slot's, or current
// for the legacy unit) names.
func (e *Env) releaseOf(f SlotFact) string {
	releases := filepath.Join(e.Config.Install.Root, "releases") + string(filepath.Separator)
	if f.MainPID > 0 {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(int(f.MainPID)) + "/exe"); err == nil && strings.HasPrefix(exe, releases) {
			return strings.SplitN(strings.TrimPrefix(exe, releases), string(filepath.Separator), 2)[0]
		}
	}
	link := units.CurrentBinary(e.Config.Install.Root)
	if f.Slot != "" {
		link = filepath.Join(units.SlotLink(e.Config.Install.Root, f.Slot), "mcp-backend")
	}
	if p, err := filepath.EvalSymlinks(link); err == nil && strings.HasPrefix(p, releases) {
		return strings.SplitN(strings.TrimPrefix(p, releases), string(filepath.Separator), 2)[0]
	}
	return ""
}

// ProductionUnit is the unit serving production now (see ServingUnit).
func (e *Env) ProductionUnit(ctx context.Context) string {
	return ServingUnit(ctx, e.Systemd, e.Config.Backend.Unit)
}

// setSlotLink points slot's link at release version.
func (e *Env) setSlotLink(slot, version string) error {
	root := e.Config.Install.Root
	link := units.SlotLink(root, slot)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("slot %s: %w", slot, err)
	}
	if err := atomicfs.Symlink(filepath.Join("..", "releases", version), link); err != nil {
		return fmt.Errorf("slot %s -> %s: %w", slot, version, err)
	}
	return nil
}

// standbyEnv is the environment file a slot's unit reads at its start.
func standbyEnv(slot string) string { return filepath.Join(units.DefaultStandbyDir, slot+".env") }

// freeLoopback returns a loopback address nobody listens on now.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// standbyTries bounds the starts of one standby whose port was taken.
const standbyTries = 3

// startStandby starts a slot serving its own listener at an address pick
// chooses. A port free when picked may be taken before the slot binds it:
// every outgoing connection on the host draws its local port from the same
// ephemeral range. So a start that failed while its port is now held by
// somebody else (taken says so, after stopping the slot) is tried again on
// another port; any other failure is the build's and is returned. addr is
// the last address tried.
func startStandby(pick func() (string, error), start func(addr string) error, taken func(addr string) bool, log *slog.Logger) (addr string, err error) {
	for try := 1; ; try++ {
		addr, err = pick()
		if err != nil {
			return "", fmt.Errorf("standby address: %w", err)
		}
		err = start(addr)
		if err == nil || try == standbyTries || !taken(addr) {
			return addr, err
		}
		log.Warn("standby port taken before the slot bound it; another port", "addr", addr, "err", err)
	}
}

// startWithStandby starts unit with its standby listener at addr, told
// through the environment file its unit reads at the start.
func (e *Env) startWithStandby(ctx context.Context, unit, envFile, addr string) error {
	err := os.MkdirAll(filepath.Dir(envFile), 0o700)
	if err == nil {
		err = atomicfs.WriteFile(envFile, []byte("MCP_BACKEND_STANDBY="+addr+"\n"), 0o600)
	}
	if err != nil {
		return fmt.Errorf("start %s: standby address: %w", unit, err)
	}
	_ = e.Systemd.ResetFailed(ctx, unit)
	err = e.Systemd.Start(ctx, unit)
	// Read at the start only: a later restart of this slot (Restart=,
	// the socket) must accept at once.
	_ = os.Remove(envFile)
	return err
}

// Takeover is what applying a SlotPlan did, for the report.
type Takeover = outcome.Takeover

// handoffWait bounds the wait for the old slot to park (or, a build before
// parking, exit) after SIGUSR2: its drain (10 s in the backend) and a
// margin; then it is stopped.
const handoffWait = 15 * time.Second

// finishWait bounds the wait, before a parked slot is stopped, for the
// calls it accepted before its handoff and still runs (it says
// mcpwire.SlotParkedFinishing until they are answered: a saturated old
// slot's queued calls can take 15-20 s); then it is stopped anyway.
const finishWait = 60 * time.Second

// applySlots applies plan to run version (build digest) within budget: a
// new slot starts in standby beside the one serving, is verified on its own
// listener (readiness, system.info version and build), takes over the
// shared socket (SIGUSR1), and only then does the old one hand off
// (SIGUSR2: it finishes what it accepted and parks). A parked old one is
// kept, able to take over again at once, when keepParked is set (a cutover
// stops it once confirmed), and stopped otherwise. A new slot that is not
// ready or not verified is stopped and its link put back: the old one was
// never touched. A parked slot of the plan (Resume) takes over again at
// once instead of a start. It returns why it failed.
func (e *Env) applySlots(ctx context.Context, plan SlotPlan, version, digest string, budget time.Duration, keepParked bool) (*Takeover, []string) {
	sd, log := e.Systemd, e.log()
	if plan.Refusal != "" {
		return nil, []string{plan.Refusal}
	}
	var warns []string
	for _, u := range plan.StopFirst {
		// A parked slot left finishing calls answers them first.
		if warn := e.waitFinished(ctx, u, finishWait); warn != "" {
			warns = append(warns, warn)
		}
		if err := sd.Stop(ctx, u); err != nil {
			return nil, []string{fmt.Sprintf("stop %s before the start: %v", u, err)}
		}
		_ = sd.ResetFailed(ctx, u)
	}
	tk := &Takeover{Warnings: warns}
	if len(plan.Old) > 0 {
		tk.From = plan.Old[0].Unit
	}
	switch {
	case plan.Keep != "":
		tk.Unit, tk.Slot = plan.Keep, units.SlotOf(e.Config.Backend.Unit, plan.Keep)
	case plan.Resume != "":
		tk.Unit, tk.Slot, tk.Resumed = plan.Resume, units.SlotOf(e.Config.Backend.Unit, plan.Resume), true
		if why := e.resume(ctx, plan.Resume, budget); why != nil {
			return tk, why
		}
	default:
		tk.Unit, tk.Slot = plan.StartUnit, plan.Start
		var oldRelease string
		if len(plan.Old) > 0 {
			oldRelease = plan.Old[0].Release
		}
		if why := e.startSlot(ctx, plan, tk, version, digest, oldRelease, budget); why != nil {
			return tk, why
		}
	}
	if len(plan.Old) > 0 {
		e.pause(ctx, PauseTookOver)
	}
	// The new slot accepts: the old ones stop accepting and finish.
	for _, o := range plan.Old {
		parked, warn, err := e.handOff(ctx, o, keepParked)
		if warn != "" {
			tk.Warnings = append(tk.Warnings, warn)
		}
		if err != nil {
			return tk, []string{err.Error()}
		}
		if parked {
			tk.Parked = append(tk.Parked, o.Unit)
		}
	}
	if plan.Legacy != "" {
		// Reloaded as systemctl disable does: systemd reads enablement
		// (UnitFileState) again only then.
		if err := sd.Disable(ctx, plan.Legacy); err != nil {
			log.Warn("disable the legacy unit", "unit", plan.Legacy, "err", err)
		} else if err := sd.DaemonReload(ctx); err != nil {
			log.Warn("daemon-reload after disabling the legacy unit", "err", err)
		}
		_ = sd.ResetFailed(ctx, plan.Legacy)
	}
	return tk, nil
}

// startSlot starts plan's slot with version and makes it accept.
func (e *Env) startSlot(ctx context.Context, plan SlotPlan, tk *Takeover, version, digest, oldRelease string, budget time.Duration) []string {
	sd, unit := e.Systemd, plan.StartUnit
	if err := e.setSlotLink(plan.Start, version); err != nil {
		return []string{err.Error()}
	}
	undo := func() {
		// Not ready or not verified: stop it; the old slot never noticed.
		sctx := context.WithoutCancel(ctx)
		_ = sd.Stop(sctx, unit)
		_ = sd.ResetFailed(sctx, unit)
		if oldRelease != "" {
			_ = e.setSlotLink(plan.Start, oldRelease)
		}
	}
	// A standby file left by a killed mcpctl must not make this start a
	// standby.
	_ = os.Remove(standbyEnv(plan.Start))
	url := e.backendURL()
	sctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var err error
	if plan.Standby {
		var addr string
		addr, err = startStandby(freeLoopback, func(addr string) error {
			return e.startWithStandby(sctx, unit, standbyEnv(plan.Start), addr)
		}, func(addr string) bool {
			// Stopped, the slot holds no listener: a port not free now
			// is somebody else's.
			sctx := context.WithoutCancel(ctx)
			_ = sd.Stop(sctx, unit)
			_ = sd.ResetFailed(sctx, unit)
			return !PortFree(addr)
		}, e.log())
		if addr != "" {
			tk.Standby, url = addr, URL(addr)
		}
	} else {
		_ = sd.ResetFailed(ctx, unit)
		err = sd.Start(sctx, unit)
	}
	if err != nil {
		undo()
		// The systemd client's errors name the job and the unit already.
		return []string{err.Error()}
	}
	if err := e.waitReady(sctx, url, digest, budget); err != nil {
		undo()
		return []string{fmt.Sprintf("%s not ready: %v", unit, err)}
	}
	if got, _, err := e.info(sctx, url); err != nil || got != version {
		undo()
		if err != nil {
			return []string{fmt.Sprintf("%s system.info: %v", unit, err)}
		}
		return []string{fmt.Sprintf("%s reports version %q, want %q", unit, got, version)}
	}
	if !plan.Standby {
		return nil
	}
	e.pause(ctx, PauseVerified)
	if why := e.takeOver(sctx, unit); why != nil {
		undo()
		return why
	}
	return nil
}

// takeOver makes unit (in standby, or parked) accept on the shared socket
// (SIGUSR1) and waits until it says so.
func (e *Env) takeOver(ctx context.Context, unit string) []string {
	sd := e.Systemd
	if err := sd.Kill(ctx, unit, syscall.SIGUSR1); err != nil {
		return []string{err.Error()}
	}
	for {
		st, err := sd.Unit(ctx, unit)
		if err == nil && st.StatusText == mcpwire.SlotAccepting {
			return nil
		}
		if ctx.Err() != nil {
			status := ""
			if st != nil {
				status = st.StatusText
			}
			return []string{fmt.Sprintf("%s did not take over the shared socket (status %q, %v)", unit, status, err)}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resume makes the parked unit accept again: it runs the same process that
// served, verified, before it parked; the caller verifies production after.
func (e *Env) resume(ctx context.Context, unit string, budget time.Duration) []string {
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if why := e.takeOver(rctx, unit); why != nil {
		return why
	}
	e.log().Info("resumed the parked slot", "unit", unit)
	return nil
}

// stopParked stops the units a confirmed cutover kept parked, each once
// the calls it accepted before its handoff are answered (within
// finishWait). It returns a warning for each stopped with calls running.
func (e *Env) stopParked(ctx context.Context, parked []string) (warns []string, err error) {
	var errs []error
	for _, u := range parked {
		if warn := e.waitFinished(ctx, u, finishWait); warn != "" {
			warns = append(warns, warn)
		}
		if err := e.Systemd.Stop(ctx, u); err != nil {
			errs = append(errs, fmt.Errorf("stop the parked %s: %w", u, err))
			continue
		}
		_ = e.Systemd.ResetFailed(ctx, u)
		e.log().Info("stopped the parked slot", "unit", u)
	}
	return warns, errors.Join(errs...)
}

// waitFinished waits, within bound, until unit no longer says it is
// finishing calls accepted before its handoff (mcpwire.SlotParkedFinishing):
// it said mcpwire.SlotParked (all answered), or another status, or it no
// longer runs. It returns a warning naming unit when the bound (or ctx)
// ended the wait first: stopping it then cuts those calls.
func (e *Env) waitFinished(ctx context.Context, unit string, bound time.Duration) (warn string) {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for waited := false; ; waited = true {
		st, err := e.Systemd.Unit(wctx, unit)
		if err == nil && (!active(st) || st.StatusText != mcpwire.SlotParkedFinishing) {
			if waited {
				status := ""
				if active(st) {
					status = st.StatusText
				}
				e.log().Info("the parked slot finished its calls", "unit", unit, "waited", time.Since(start).Round(time.Millisecond), "status", status)
			}
			return ""
		}
		select {
		case <-wctx.Done():
			after := time.Since(start).Round(time.Millisecond)
			e.log().Warn("the parked slot still finishes calls; stopping it", "unit", unit, "waited", after)
			return fmt.Sprintf("%s was still finishing calls accepted before its handoff after %s: stopped anyway; those calls were cut", unit, after)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// handOff makes o stop accepting and finish: a process that said it
// accepts on the shared socket (a slot, or a legacy unit already running a
// build that knows the slots) hands off (SIGUSR2) and parks once its calls
// are answered (a build before parking exits instead); one that said
// nothing (an older build, to which SIGUSR2 is fatal) is stopped, which
// drains its running calls but answers its next ones UNAVAILABLE. A parked
// o is left running when keep is set, and stopped otherwise, once the calls
// it still runs are answered (within finishWait). It reports
// whether o was left parked, and a warning when it exited or never parked
// instead: it did not finish its drain as a handoff does.
func (e *Env) handOff(ctx context.Context, o SlotFact, keep bool) (parked bool, warn string, err error) {
	sd := e.Systemd
	if o.StatusText == mcpwire.SlotAccepting {
		if err := sd.Kill(ctx, o.Unit, syscall.SIGUSR2); err != nil {
			return false, "", err
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, handoffWait)
		defer cancel()
		state := "still handing off"
		for wctx.Err() == nil {
			st, err := sd.Unit(wctx, o.Unit)
			if err == nil && !active(st) {
				state = fmt.Sprintf("exited (result %s, status %d)", st.Result, st.ExecMainStatus)
				break
			}
			if err == nil && parkedText(st.StatusText) {
				state, parked = "parked", true
				if st.StatusText == mcpwire.SlotParkedFinishing {
					state = "parked, finishing calls"
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		after := time.Since(start).Round(time.Millisecond)
		if !parked {
			warn = fmt.Sprintf("%s did not park after the handoff: %s after %s; calls it was running may have been cut", o.Unit, state, after)
			e.log().Warn("handed off", "unit", o.Unit, "state", state, "after", after)
		} else {
			e.log().Info("handed off", "unit", o.Unit, "state", state, "after", after)
		}
		if parked && keep {
			return true, "", nil
		}
		if parked {
			// Stopped only once the calls it still runs are answered.
			warn = e.waitFinished(ctx, o.Unit, finishWait)
		}
	} else {
		e.log().Info("stopping; its build knows no handoff", "unit", o.Unit)
	}
	if err := sd.Stop(ctx, o.Unit); err != nil {
		return false, warn, fmt.Errorf("stop %s after the takeover: %w", o.Unit, err)
	}
	_ = sd.ResetFailed(ctx, o.Unit)
	return false, warn, nil
}

// settleSlots points every slot's link at version once it alone serves:
// whichever slot the boot or the socket starts next runs it.
func (e *Env) settleSlots(version string) error {
	var errs []error
	for _, s := range units.Slots {
		errs = append(errs, e.setSlotLink(s, version))
	}
	return errors.Join(errs...)
}

// LinkMissingSlots points each slot link that does not exist at the
// current release, so that a host moved to the slots by `mcpctl unit
// install` starts its boot slot (at boot, by the socket) on what it runs
// now. A host without a current release links nothing. It returns the
// slots it linked.
func LinkMissingSlots(root string) ([]string, error) {
	cur, missing, err := MissingSlotLinks(root)
	if err != nil {
		return nil, err
	}
	var linked []string
	for _, s := range missing {
		link := units.SlotLink(root, s)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return linked, err
		}
		if err := atomicfs.Symlink(filepath.Join("..", "releases", cur), link); err != nil {
			return linked, fmt.Errorf("slot %s -> %s: %w", s, cur, err)
		}
		linked = append(linked, s)
	}
	return linked, nil
}

// MissingSlotLinks reads which slots have no link yet and the current
// release LinkMissingSlots would link them to (none without a current
// release): unit install --dry-run reports it, changing nothing.
func MissingSlotLinks(root string) (current string, missing []string, err error) {
	cur, err := (&release.Store{Root: root}).Current()
	if errors.Is(err, release.ErrNoCurrent) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	for _, s := range units.Slots {
		if _, err := os.Lstat(units.SlotLink(root, s)); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return cur, missing, err
		}
		missing = append(missing, s)
	}
	return cur, missing, nil
}
