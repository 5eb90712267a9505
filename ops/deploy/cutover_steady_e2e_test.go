package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/ops/snapshot"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/stress"
	"github.com/overdeck/mcp-backend/units"
)

// phase is one mcpctl command run while the steady load ran.
type phase struct {
	name       string
	start, end time.Time
}

// socketRun is the socket unit's identity: it changes whenever the socket
// is started again, which means its port was closed in between.
func (s *site) socketRun() (active, invocation string, since time.Time) {
	s.T.Helper()
	st, err := s.M.Client.Unit(context.Background(), units.Socket(s.Cfg.Backend.Unit))
	if err != nil {
		s.T.Fatal(err)
	}
	return st.ActiveState, st.InvocationID, st.ActiveEnterTimestamp
}

// TestCutoversUnderSteadyLoad is what an operator sees during deploys: a
// steady 20 calls/s (half shell.exec, half system.info) through both tunnels
// while production goes through three cutovers, a `rollback --last` after a
// confirmed one, two cutovers to bad builds (one never ready, one ready but
// reporting another version) and an operator's rollback to a snapshot. Each
// good step moves production to the other slot, whose predecessor hands
// off and exits by itself. No caller may see any failure at all, OVERLOADED
// included: each new build starts in the idle slot beside the serving one
// and takes over the shared socket only once verified, and a bad build never
// touches the serving process (same unit, MainPID and InvocationID). The
// tunnels and the socket are never restarted. The figures lines are the
// longest call and each step's duration.
func TestCutoversUnderSteadyLoad(t *testing.T) {
	s := newSite(t, 60*time.Second)
	for _, v := range []string{"v2", "v3", "v4"} {
		s.Pass(s.Build(v))
	}
	tunnelsBefore := s.invocations()
	sockActive, sockInv, sockSince := s.socketRun()
	if sockActive != "active" || sockInv == "" {
		t.Fatalf("socket %s is %q (invocation %q), want active", units.Socket(s.Cfg.Backend.Unit), sockActive, sockInv)
	}

	var mu sync.Mutex
	var calls []stress.SteadyCall
	stop := make(chan struct{})
	type outcome struct {
		rep *stress.SteadyReport
		err error
	}
	done := make(chan outcome, 1)
	targets := []string{s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL}
	go func() {
		rep, err := stress.RunSteady(context.Background(), stress.SteadyConfig{
			Targets: targets, Rate: 20, Duration: 10 * time.Minute, Stop: stop,
			OnCall: func(c stress.SteadyCall) { mu.Lock(); calls = append(calls, c); mu.Unlock() },
		})
		done <- outcome{rep, err}
	}()
	stopped := false
	stopLoad := func() outcome {
		if !stopped {
			close(stop)
			stopped = true
		}
		return <-done
	}
	defer func() {
		if !stopped {
			stopLoad()
		}
	}()
	// The load is flowing before the first cutover.
	okCalls := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			if c.Outcome == stress.OutcomeOK {
				n++
			}
		}
		return n
	}
	waitCalls := func(n int) {
		for end := time.Now().Add(60 * time.Second); okCalls() < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("fewer than %d ok calls through the tunnels", n)
			}
		}
	}
	waitCalls(40)

	// The longest the socket's accept queue grew: how much backlog the
	// restarts needed (the kernel shows it as a listener's rx_queue).
	backlog := peakAcceptQueue(s.Cfg.Backend.Listen, stop)

	var phases []phase
	step := func(name string, wantCode int, args ...string) string {
		t.Helper()
		start := time.Now()
		code, out := s.Run(args...)
		phases = append(phases, phase{name, start, time.Now()})
		if code != wantCode {
			t.Fatalf("%s: exit %d, want %d:\n%s", name, code, wantCode, out)
		}
		t.Logf("%s:\n%s", name, out)
		// Each step starts under load with production settled (nothing
		// queued), so its figures are its own.
		waitCalls(okCalls() + 40)
		proctest.Eventually(t, "production's queue empty", func() bool {
			code, body, err := (&verify.Client{}).Metrics(context.Background(), s.Backend)
			if err != nil || code != 200 {
				t.Logf("metrics: %d %v %s", code, err, body)
			}
			var m struct {
				Queued struct {
					Total int `json:"total"`
				} `json:"queued"`
			}
			return err == nil && code == 200 && json.Unmarshal(body, &m) == nil && m.Queued.Total == 0
		})
		return out
	}
	// Built before the load starts: only the steps run under it.
	neverReady := writeNeverReady(t, s, s.Build("v5"))
	wrongVersion := writeWrongVersion(t, s, s.Build("v6"), s.Builds["v4"])
	for _, c := range []struct {
		name    string
		code    int
		args    func() []string // at the step: a snapshot named by an earlier one
		version string
		// switched: production moves to the other slot; untouched: the
		// serving process is the same (unit, MainPID, InvocationID).
		switched, untouched bool
	}{
		{name: "cutover v1->v2", version: "v2", switched: true,
			args: func() []string { return []string{"cutover", "--build", s.Builds["v2"], "--arm-rollback"} }},
		{name: "cutover v2->v3", version: "v3", switched: true,
			args: func() []string { return []string{"cutover", "--build", s.Builds["v3"], "--arm-rollback"} }},
		// After a confirmed cutover: the newest snapshot (of v2) starts in
		// the idle slot beside v3, which hands off.
		{name: "rollback --last v3->v2", version: "v2", switched: true,
			args: func() []string { return []string{"rollback", "--last"} }},
		{name: "cutover v2->v4", version: "v4", switched: true,
			args: func() []string { return []string{"cutover", "--build", s.Builds["v4"], "--arm-rollback"} }},
		// Two bad builds: one never becomes ready, one is ready but reports
		// another version. Neither may touch the serving process.
		{name: "bad cutover v4->v5 (never ready)", code: 3, version: "v4", untouched: true,
			args: func() []string {
				return []string{"cutover", "--build", neverReady, "--arm-rollback", "--deadline", "15s", "--skip-canary-check", "e2e: never ready"}
			}},
		{name: "bad cutover v4->v6 (fails verification)", code: 3, version: "v4", untouched: true,
			args: func() []string {
				return []string{"cutover", "--build", wrongVersion, "--arm-rollback", "--deadline", "15s", "--skip-canary-check", "e2e: fails verification"}
			}},
		// The operator goes back: the snapshot the cutover to v4 took, of v2.
		{name: "operator rollback --snapshot v4->v2", version: "v2", switched: true,
			args: func() []string { return []string{"rollback", "--snapshot", snapshotOfVersion(t, s, "v2")} }},
	} {
		unit0, pid0, inv0 := s.Prod()
		out := step(c.name, c.code, c.args()...)
		unit, pid, inv := s.Prod()
		if c.untouched && (unit != unit0 || pid != pid0 || inv != inv0) {
			t.Fatalf("%s touched production: was %s pid %d invocation %s, now %s pid %d invocation %s", c.name, unit0, pid0, inv0, unit, pid, inv)
		}
		if c.switched && unit == unit0 {
			t.Fatalf("%s: production still in %s, want the other slot", c.name, unit)
		}
		if c.switched && !strings.Contains(out, `msg="handed off" unit=`+unit0+` state=parked`) {
			t.Fatalf("%s: %s did not hand off and park:\n%s", c.name, unit0, out)
		}
		if a, _ := s.Unit(unit0); c.switched && a != "inactive" {
			t.Fatalf("%s: %s is %s after the step, want inactive (a parked slot is stopped once confirmed)", c.name, unit0, a)
		}
		if v := s.Version(); v != c.version {
			t.Fatalf("after %s production runs %s, want %s", c.name, v, c.version)
		}
	}
	o := stopLoad()
	if o.err != nil {
		t.Fatal(o.err)
	}
	rep := o.rep

	// Figures per step: what callers saw while each command ran.
	for _, p := range phases {
		c := stressCountsIn(calls, p.start, p.end)
		t.Logf("figures: %-42s took %6.0f ms; %4d calls: %d transport, %d HTTP, %d JSON-RPC, %d tool errors %v; wait p99 %.0f ms, max %.0f ms",
			p.name, float64(p.end.Sub(p.start).Milliseconds()), c.Calls, c.Transport, c.HTTP, c.JSONRPC, c.Tool, c.ToolByCode, c.Wait.P99Ms, c.Wait.MaxMs)
	}
	t.Logf("figures: peak accept queue of %s: %d connections (Backlog=%d)", units.Socket(s.Cfg.Backend.Unit), backlog(), units.SocketBacklog)
	tot := rep.Total
	t.Logf("figures: whole run %d calls in %d targets: %d ok, %d transport, %d HTTP, %d JSON-RPC, %d tool errors %v, %d bad replies; wait p50 %.0f ms, p99 %.0f ms, max %.0f ms",
		tot.Calls, len(rep.Targets), tot.OK, tot.Transport, tot.HTTP, tot.JSONRPC, tot.Tool, tot.ToolByCode, tot.BadReply, tot.Wait.P50Ms, tot.Wait.P99Ms, tot.Wait.MaxMs)
	for _, c := range rep.Targets {
		for _, sample := range c.Samples {
			t.Logf("  %s: %s", c.Target, sample)
		}
	}
	if !tot.Clean() {
		t.Errorf("callers saw %d transport failures, %d HTTP errors, %d JSON-RPC errors and %d unreadable replies; want none", tot.Transport, tot.HTTP, tot.JSONRPC, tot.BadReply)
	}
	// The new build starts beside the old one and takes over only once
	// verified; the old one finishes every call it accepted: no caller
	// sees a restart at all.
	if tot.Tool > 0 {
		t.Errorf("tool errors %v: want none (no call may be cut or refused across a cutover)", tot.ToolByCode)
	}
	// The longest call (the goal: within 1.5 s) is a figure above,
	// not asserted: on a starved machine it measures the machine. What
	// waited for a restart before the slots fails the checks above: the
	// calls came back OVERLOADED or timed out.
	for i, c := range rep.Targets {
		if c.OK == 0 {
			t.Errorf("no ok call through %s (%s)", s.Cfg.Tunnels[i].Name, c.Target)
		}
	}
	if after := s.invocations(); fmt.Sprint(after) != fmt.Sprint(tunnelsBefore) {
		t.Errorf("tunnels restarted: before %v after %v", tunnelsBefore, after)
	}
	if a, inv, since := s.socketRun(); a != "active" || inv != sockInv || !since.Equal(sockSince) {
		t.Errorf("socket restarted: was active %s since %s, now %s %s since %s", sockInv, sockSince, a, inv, since)
	}
	s.assertNoRollbackArmed()
}

// writeWrongVersion is a candidate that prints build's version but serves
// with other: it becomes ready and fails verification (system.info names
// another version).
func writeWrongVersion(t testing.TB, s *site, build, other string) string {
	t.Helper()
	p := filepath.Join(s.Dir, "bin", "wrong-version-"+filepath.Base(build))
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = serve ]; then exec %s \"$@\"; fi\nexec %s \"$@\"\n", other, build)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// stressCountsIn counts the calls that ended in [from, to): a failure
// belongs to the step during which the caller saw it.
func stressCountsIn(calls []stress.SteadyCall, from, to time.Time) stressWindow {
	var w stressWindow
	w.ToolByCode = map[string]int{}
	var waits []time.Duration
	for _, c := range calls {
		if end := c.Start.Add(c.Latency.D()); end.Before(from) || !end.Before(to) {
			continue
		}
		w.Calls++
		waits = append(waits, c.Latency.D())
		switch c.Outcome {
		case stress.OutcomeOK:
		case stress.OutcomeTransport:
			w.Transport++
		case stress.OutcomeHTTPError:
			w.HTTP++
		case stress.OutcomeRPCError:
			w.JSONRPC++
		case stress.OutcomeOverloaded, stress.OutcomeCancelled, stress.OutcomeToolError:
			w.Tool++
			w.ToolByCode[c.Code]++
		}
	}
	slices.Sort(waits)
	w.Wait = stress.Summarize(waits)
	return w
}

type stressWindow struct {
	Calls, Transport, HTTP, JSONRPC, Tool int
	ToolByCode                            map[string]int
	Wait                                  stress.Latency
}

// snapshotOfVersion is the newest snapshot of production on version v.
func snapshotOfVersion(t testing.TB, s *site, v string) string {
	t.Helper()
	list, err := snapshot.List(s.Cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Manifest != nil && e.Manifest.Version == v {
			return e.Manifest.ID
		}
	}
	t.Fatalf("no snapshot of %s in %v", v, list)
	return ""
}

// peakAcceptQueue samples the accept queue of the TCP listener on listen's
// port every 20 ms until stop and returns the largest it saw.
func peakAcceptQueue(listen string, stop <-chan struct{}) func() int {
	_, p, _ := net.SplitHostPort(listen)
	port, _ := strconv.Atoi(p)
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			b, err := os.ReadFile("/proc/net/tcp")
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				f := strings.Fields(line)
				if len(f) < 5 || f[3] != "0A" {
					continue
				}
				i := strings.LastIndexByte(f[1], ':')
				lp, _ := strconv.ParseUint(f[1][i+1:], 16, 32)
				_, rx, _ := strings.Cut(f[4], ":")
				n, _ := strconv.ParseUint(rx, 16, 32)
				if int(lp) == port && int64(n) > peak.Load() {
					peak.Store(int64(n))
				}
			}
		}
	}()
	return func() int { <-done; return int(peak.Load()) }
}

// legacyInstall turns the site into an installation made before the
// production slots: the single production unit (from the slot template,
// run through current) serves, the slot template and slice are gone, and
// with socket false also the socket unit (the service binds its port
// itself, as before the socket unit existed).
func (s *site) legacyInstall(ctx context.Context, socket bool) {
	s.T.Helper()
	sock, svc := units.Socket(s.Cfg.Backend.Unit), s.Cfg.Backend.Unit
	tmpl := filepath.Join(s.M.UnitsDir, units.SlotTemplate(svc))
	b, err := os.ReadFile(tmpl)
	if err != nil {
		s.T.Fatal(err)
	}
	var legacy []string
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "Sockets="), strings.HasPrefix(l, "Slice="), strings.HasPrefix(l, "EnvironmentFile="),
			strings.HasPrefix(l, "DefaultInstance="), !socket && strings.HasPrefix(l, "Requires="):
			continue
		case strings.HasPrefix(l, "ExecStart="):
			l = strings.Replace(l, filepath.Join(units.SlotLink(s.Cfg.Install.Root, "%i"), "mcp-backend"), units.CurrentBinary(s.Cfg.Install.Root), 1)
		case !socket && strings.HasPrefix(l, "After="):
			l = strings.Replace(l, " "+sock, "", 1)
		}
		legacy = append(legacy, l)
	}
	boot := units.SlotUnit(svc, units.BootSlot)
	steps := []func() error{
		func() error { return s.M.Client.Stop(ctx, boot) },
		func() error {
			return os.WriteFile(filepath.Join(s.M.UnitsDir, svc), []byte(strings.Join(legacy, "\n")), 0o644)
		},
		func() error { return os.Remove(tmpl) },
		func() error { return os.Remove(filepath.Join(s.M.UnitsDir, units.BackendSlice(svc))) },
	}
	sockPath := filepath.Join(s.M.UnitsDir, sock)
	if socket {
		// The socket as the single unit's install wrote it: it starts that unit.
		steps = append(steps, func() error {
			b, err := os.ReadFile(sockPath)
			if err != nil {
				return err
			}
			return os.WriteFile(sockPath, []byte(strings.Replace(string(b), "Service="+boot, "Service="+svc, 1)), 0o644)
		})
	} else {
		steps = append(steps, func() error { return s.M.Client.Stop(ctx, sock) }, func() error { return os.Remove(sockPath) })
	}
	steps = append(steps, func() error { return s.M.Client.DaemonReload(ctx) },
		func() error { return s.M.Client.Enable(ctx, svc) },
		func() error { return s.M.Client.Start(ctx, svc) })
	for _, step := range steps {
		if err := step(); err != nil {
			s.T.Fatal(err)
		}
	}
	s.WaitHTTP(s.Backend+"/readyz", 20*time.Second)
	if u, _, _ := s.Prod(); u != svc {
		s.T.Fatalf("production %s, want the single unit %s", u, svc)
	}
}

// assertLegacyGone: the single unit neither runs nor starts at boot.
func (s *site) assertLegacyGone(ctx context.Context) {
	s.T.Helper()
	st, err := s.M.Client.Unit(ctx, s.Cfg.Backend.Unit)
	if err != nil {
		s.T.Fatal(err)
	}
	if st.ActiveState != "inactive" || st.UnitFileState == "enabled" {
		s.T.Fatalf("the single unit %s is %s, %s after the move to slots; want inactive, not enabled", s.Cfg.Backend.Unit, st.ActiveState, st.UnitFileState)
	}
}

// TestCutoverFromTheSingleUnit is the upgrade path: a host installed
// before the production slots (one unit behind the socket) moves to slots
// at its next cutover, or at `mcpctl unit install` and the cutover after
// it, without a gap: under a steady load no call fails, the socket keeps
// its run, the single unit hands off, is disabled and the new release
// serves from the boot slot.
func TestCutoverFromTheSingleUnit(t *testing.T) {
	for _, c := range []struct {
		name                string
		unitInstall, reboot bool
	}{
		{name: "at its next cutover"},
		{name: "after unit install", unitInstall: true},
		// Rebooted before any cutover: the boot slot comes up alone.
		{name: "after unit install and a reboot", unitInstall: true, reboot: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t, 60*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			s.legacyInstall(ctx, true)
			if c.unitInstall {
				s.unitInstallOverSingleUnit(ctx)
			}
			if !c.reboot {
				s.cutoverFromSingleUnit(ctx)
				return
			}
			s.M.Reboot(t)
			s.WaitHTTP(s.Backend+"/readyz", 30*time.Second)
			boot := units.SlotUnit(s.Cfg.Backend.Unit, units.BootSlot)
			if u, _, _ := s.Prod(); u != boot || s.Version() != "v1" {
				t.Fatalf("after the reboot production %s on %s, want %s on v1", u, s.Version(), boot)
			}
			s.assertLegacyGone(ctx)
		})
	}
}

// unitInstallOverSingleUnit runs `mcpctl unit install` on a host whose
// single unit serves, with no slot links yet (as one installed before the
// slots): it writes the slot template, their slice and the socket's
// Service=, enables the boot slot, and touches no running process.
func (s *site) unitInstallOverSingleUnit(ctx context.Context) {
	t := s.T
	t.Helper()
	if err := os.RemoveAll(filepath.Dir(units.SlotLink(s.Cfg.Install.Root, units.BootSlot))); err != nil {
		t.Fatal(err)
	}
	unit0, pid0, inv0 := s.Prod()
	_, sockInv, sockSince := s.socketRun()
	code, out := s.Run("--json", "unit", "install")
	if code != 0 {
		t.Fatalf("unit install over the single unit: exit %d\n%s", code, out)
	}
	var rep struct {
		Changed []struct {
			Unit string `json:"unit"`
		} `json:"changed"`
		LinkedSlots []string `json:"linkedSlots"`
		Disabled    []string `json:"disabled"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("unit install --json: %v\n%s", err, out)
	}
	var changed []string
	for _, ch := range rep.Changed {
		changed = append(changed, ch.Unit)
	}
	slices.Sort(changed)
	svc, boot := s.Cfg.Backend.Unit, units.SlotUnit(s.Cfg.Backend.Unit, units.BootSlot)
	want := []string{units.BackendSlice(svc), units.Socket(svc), units.SlotTemplate(svc)}
	slices.Sort(want)
	if !slices.Equal(changed, want) {
		t.Fatalf("unit install changed %v, want %v:\n%s", changed, want, out)
	}
	// The slots start on what runs now; the single unit serves on, no
	// longer started at boot.
	if !slices.Equal(rep.LinkedSlots, units.Slots) || !slices.Equal(rep.Disabled, []string{svc}) {
		t.Fatalf("unit install linked slots %v and disabled %v, want %v and %s", rep.LinkedSlots, rep.Disabled, units.Slots, svc)
	}
	for _, slot := range units.Slots {
		if l, err := os.Readlink(units.SlotLink(s.Cfg.Install.Root, slot)); err != nil || filepath.Base(l) != "v1" {
			t.Fatalf("slot %s links %q (%v), want the current release v1", slot, l, err)
		}
	}
	if st, err := s.M.Client.Unit(ctx, svc); err != nil || st.UnitFileState != "disabled" {
		t.Fatalf("%s after unit install: %+v %v, want disabled", svc, st, err)
	}
	if unit, pid, inv := s.Prod(); unit != unit0 || pid != pid0 || inv != inv0 {
		t.Fatalf("unit install touched production: was %s pid %d %s, now %s pid %d %s", unit0, pid0, inv0, unit, pid, inv)
	}
	if a, inv, since := s.socketRun(); a != "active" || inv != sockInv || !since.Equal(sockSince) {
		t.Fatalf("unit install restarted the socket: was %s since %s, now %s %s since %s", sockInv, sockSince, a, inv, since)
	}
	// The socket starts the boot slot from now on, at boot too (the other
	// slot is listed as well: its Sockets= names the socket).
	triggers, err := s.M.Exec(ctx, "systemctl", "show", "-P", "Triggers", units.Socket(svc))
	if f := strings.Fields(triggers); err != nil || !slices.Contains(f, boot) || slices.Contains(f, svc) {
		t.Fatalf("%s triggers %q (%v), want %s and not %s", units.Socket(svc), triggers, err, boot, svc)
	}
	if st, err := s.M.Client.Unit(ctx, boot); err != nil || st.LoadState != "loaded" || st.UnitFileState != "enabled" {
		t.Fatalf("%s after unit install: %+v %v, want loaded, enabled", boot, st, err)
	}
	if v := s.Version(); v != "v1" {
		t.Fatalf("production %s after unit install, want v1", v)
	}
}

// cutoverFromSingleUnit cuts the single unit over to v2 under a steady
// load: no call may fail, the single unit hands off and is disabled, the
// boot slot serves v2, the socket keeps its run.
func (s *site) cutoverFromSingleUnit(ctx context.Context) {
	t := s.T
	t.Helper()
	_, sockInv, sockSince := s.socketRun()
	s.Pass(s.Builds["v2"])

	var mu sync.Mutex
	var calls []stress.SteadyCall
	stop := make(chan struct{})
	done := make(chan *stress.SteadyReport, 1)
	go func() {
		rep, err := stress.RunSteady(context.Background(), stress.SteadyConfig{
			Targets: []string{s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL}, Rate: 20, Duration: 5 * time.Minute, Stop: stop,
			OnCall: func(c stress.SteadyCall) { mu.Lock(); calls = append(calls, c); mu.Unlock() },
		})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(3 * time.Second)
	start := time.Now()
	code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
	end := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	rep := <-done
	if code != 0 {
		t.Fatalf("cutover from the single unit: exit %d\n%s", code, out)
	}
	t.Logf("cutover:\n%s", out)
	// The single unit runs a build that knows the slots: it hands off
	// instead of being stopped (a stop answers its next calls UNAVAILABLE).
	if want := `msg="handed off" unit=` + s.Cfg.Backend.Unit + ` state=parked`; !strings.Contains(out, want) {
		t.Errorf("the single unit did not hand off (want %q in the output)", want)
	}
	mu.Lock()
	c := stressCountsIn(calls, start, end)
	mu.Unlock()
	t.Logf("figures: cutover from the single unit took %d ms; %d calls: %d transport, %d HTTP, %d JSON-RPC, %d tool errors %v; wait p99 %.0f ms, max %.0f ms",
		end.Sub(start).Milliseconds(), c.Calls, c.Transport, c.HTTP, c.JSONRPC, c.Tool, c.ToolByCode, c.Wait.P99Ms, c.Wait.MaxMs)
	if tot := rep.Total; !tot.Clean() || tot.Tool > 0 || tot.OK == 0 {
		t.Errorf("callers saw %d ok, %d transport, %d HTTP, %d JSON-RPC, %d tool errors %v, %d unreadable; want every call ok",
			tot.OK, tot.Transport, tot.HTTP, tot.JSONRPC, tot.Tool, tot.ToolByCode, tot.BadReply)
	}
	if u, _, _ := s.Prod(); u != units.SlotUnit(s.Cfg.Backend.Unit, units.BootSlot) || s.Version() != "v2" {
		t.Fatalf("production %s on %s, want %s on v2", u, s.Version(), units.SlotUnit(s.Cfg.Backend.Unit, units.BootSlot))
	}
	s.assertLegacyGone(ctx)
	if a, inv, since := s.socketRun(); a != "active" || inv != sockInv || !since.Equal(sockSince) {
		t.Errorf("socket restarted: was %s since %s, now %s %s since %s", sockInv, sockSince, a, inv, since)
	}
	s.assertNoRollbackArmed()
}

// TestCutoverOntoTheSocketAndBack: production installed before the socket
// unit existed (the service binds its port itself). The first cutover
// stops it (the one move with a gap: the socket needs its port), installs
// the socket and the slots and starts the new release in the boot slot; a
// rollback to the snapshot from before restores that release in the other
// slot beside it, keeping the socket (the slot layout is this mcpctl's);
// the next cutover goes on from there.
func TestCutoverOntoTheSocketAndBack(t *testing.T) {
	s := newSite(t, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s.legacyInstall(ctx, false)
	if a, _, _ := s.socketRun(); a == "active" {
		t.Fatal("the older installation has an active socket")
	}

	s.Pass(s.Builds["v2"])
	if code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback"); code != 0 {
		t.Fatalf("first cutover onto the socket: exit %d\n%s", code, out)
	}
	a, sockInv, _ := s.socketRun()
	if a != "active" || sockInv == "" || s.Version() != "v2" {
		t.Fatalf("after the cutover socket %s %s, production %s; want the socket active and v2", a, sockInv, s.Version())
	}
	s.assertLegacyGone(ctx)

	if code, out := s.Run("rollback", "--last"); code != 0 {
		t.Fatalf("rollback to the snapshot without a socket: exit %d\n%s", code, out)
	}
	if a, inv, _ := s.socketRun(); a != "active" || inv != sockInv {
		t.Fatalf("socket %s %s after the rollback, want the same run %s", a, inv, sockInv)
	}
	if s.Version() != "v1" {
		t.Fatalf("production %s after the rollback, want v1", s.Version())
	}
	s.assertLegacyGone(ctx)

	if code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback"); code != 0 {
		t.Fatalf("cutover after the rollback: exit %d\n%s", code, out)
	}
	if a, _, _ := s.socketRun(); a != "active" || s.Version() != "v2" {
		t.Fatalf("socket %s, production %s; want active and v2", a, s.Version())
	}
	s.Prod()
	s.assertNoRollbackArmed()
}
