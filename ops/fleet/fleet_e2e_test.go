package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
)

// fleetHost is one host of the test fleet: production v1 installed by
// `mcpctl install`, and the first host's key restricted to the agent's
// gate (see nspawntest.Hosts).
type fleetHost struct {
	*nspawntest.Host
}

// testFleet is the controller's side: its mcpctl (run on this machine as
// an operator would), its key and known_hosts, the builds it rolls out.
type testFleet struct {
	t          testing.TB
	dir        string
	ctl        string
	key        string
	knownHosts string
	hosts      []*fleetHost
	// tmp is the controllers' TMPDIR: their ssh control dirs live there,
	// so a killed controller's are told apart from another test run's on
	// the same machine (short: a control socket's path is at most 108
	// bytes).
	tmp string
}

func newTestFleet(t *testing.T, n int) *testFleet {
	t.Helper()
	nspawntest.RequireSSH(t)
	f := &testFleet{t: t, dir: t.TempDir()}
	tmp, err := os.MkdirTemp("", "fe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	f.tmp = tmp
	f.ctl = nspawntest.BuildBinary(t, "./cmd/mcpctl", "fleet-e2e")
	var pub string
	f.key, pub = nspawntest.SSHKey(t, f.dir, "id_fleet")
	hosts := nspawntest.Hosts(t, n, nspawntest.HostOptions{
		PublicKey: pub,
		Mcpctl:    f.ctl,
		Install:   nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v1"),
		// The first host's key is restricted to the fleet agent's gate, as
		// the README's runbook says: the whole protocol must pass through it.
		AuthorizedKey: func(i int, h *nspawntest.Host) string {
			if i > 0 {
				return pub
			}
			return fmt.Sprintf(`restrict,command="%s fleet-agent gate --fleet-dir %s --config %s" %s`, h.Mcpctl(), h.FleetDir(), h.CfgPath, pub)
		},
	})
	for _, h := range hosts {
		f.hosts = append(f.hosts, &fleetHost{h})
	}
	f.writeKnownHosts(nil)
	return f
}

// writeKnownHosts writes the controller's known_hosts: each host's real
// key, or the line override gives for a host.
func (f *testFleet) writeKnownHosts(override map[string]string) {
	f.t.Helper()
	f.knownHosts = filepath.Join(f.dir, "known_hosts")
	var b strings.Builder
	for _, h := range f.hosts {
		line := h.SSHD.KnownHost
		if o, ok := override[h.Name]; ok {
			line = o
		}
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(f.knownHosts, []byte(b.String()), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// inventory writes mcpctl-fleet.json for a scenario (its own file, so its
// own run log and lock) and returns its path.
func (f *testFleet) inventory(name string, rollout map[string]any) string {
	f.t.Helper()
	hosts := []map[string]any{}
	for _, h := range f.hosts {
		hosts = append(hosts, map[string]any{
			"name": h.Name, "address": "127.0.0.1", "port": h.SSHD.Port,
			"config": h.CfgPath, "agent": h.Mcpctl(), "fleetDir": h.FleetDir(),
		})
	}
	r := map[string]any{"waves": []any{1, "50%", "100%"}, "parallelism": 4, "maxFailures": 0, "onFailure": "revert",
		"stress": map[string]any{"profile": "overload", "duration": "3s"}, "stepTimeout": "5m"}
	for k, v := range rollout {
		r[k] = v
	}
	p := filepath.Join(f.dir, "fleet-"+name+".json")
	nspawntest.WriteJSON(f.t, p, map[string]any{
		"hosts":   hosts,
		"ssh":     map[string]any{"knownHosts": f.knownHosts, "identity": f.key, "connectTimeout": "3s", "serverAliveInterval": "2s", "controlPersist": "30s"},
		"rollout": r,
	})
	return p
}

// build is a mcp-backend really stamped with version.
func (f *testFleet) build(version string) string {
	return nspawntest.BuildBinary(f.t, "./cmd/mcp-backend", version)
}

// command is the controller's mcpctl with args, on this machine.
func (f *testFleet) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, f.ctl, append([]string{"--no-color"}, args...)...)
	cmd.Dir = f.dir
	cmd.Env = append(os.Environ(), "TMPDIR="+f.tmp)
	return cmd
}

// fleetRun runs the controller to its end and returns its exit code and
// output.
func (f *testFleet) fleetRun(t testing.TB, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := f.command(ctx, args...).CombinedOutput()
	t.Logf("mcpctl %s: %s\n%s", strings.Join(args, " "), time.Since(t0).Round(100*time.Millisecond), out)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("mcpctl %v: %v", args, err)
	return -1, ""
}

// hostState is what a host runs, observed by the test itself: the current
// link, the digest of the binary behind it, the pending marker, the units'
// InvocationIDs.
type hostState struct {
	Version, Digest string
	Pending         bool
	Backend         string
	Tunnels         []string
	Steps           int // step outcome files in the fleet dir
}

func (h *fleetHost) state(t testing.TB) hostState {
	t.Helper()
	o := h.Observe(t)
	if o.Version == "" {
		t.Fatalf("%s: no current release", h.Name)
	}
	if o.Active != "active" {
		t.Errorf("%s: %s is %s, want active", h.Name, o.Production, o.Active)
	}
	s := hostState{Version: o.Version, Digest: o.Digest, Pending: o.Pending, Backend: o.Backend, Tunnels: o.Tunnels}
	m, _ := filepath.Glob(filepath.Join(h.FleetDir(), "steps", "*.json"))
	s.Steps = len(m)
	return s
}

func (f *testFleet) states(t testing.TB) map[string]hostState {
	out := map[string]hostState{}
	for _, h := range f.hosts {
		out[h.Name] = h.state(t)
	}
	return out
}

// expect checks that every host runs what want says (host -> build path),
// with no cutover pending, its tunnels never restarted, and its backend
// restarted exactly when restarted says.
func (f *testFleet) expect(t testing.TB, before map[string]hostState, want map[string]string, restarted map[string]bool) map[string]hostState {
	t.Helper()
	now := f.states(t)
	for _, h := range f.hosts {
		s, b := now[h.Name], before[h.Name]
		d, err := buildinfo.FileDigest(want[h.Name])
		if err != nil {
			t.Fatal(err)
		}
		if s.Digest != d {
			t.Errorf("%s runs %s (%s), want %s", h.Name, s.Version, s.Digest[:19], want[h.Name])
		}
		if s.Pending {
			t.Errorf("%s: a cutover is still pending", h.Name)
		}
		if strings.Join(s.Tunnels, ",") != strings.Join(b.Tunnels, ",") {
			t.Errorf("%s: tunnels restarted: %v -> %v", h.Name, b.Tunnels, s.Tunnels)
		}
		if got := s.Backend != b.Backend; got != restarted[h.Name] {
			t.Errorf("%s: backend restarted = %v (InvocationID %s -> %s), want %v", h.Name, got, b.Backend, s.Backend, restarted[h.Name])
		}
	}
	return now
}

// events reads a scenario's run log.
func events(t testing.TB, inv string) []fleet.Event {
	t.Helper()
	inventory := &fleet.Inventory{Path: inv}
	evs, err := (&fleet.RunLog{Path: inventory.LogPath()}).Read()
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// stepSpan is a step's start and end by its host's clock.
func stepSpan(evs []fleet.Event, host, step string) (start, end time.Time) {
	for _, e := range evs {
		if e.Type == fleet.EvStepEnd && e.Host == host && e.Step == step && !e.HostStart.IsZero() {
			start, end = e.HostStart, e.HostEnd
		}
	}
	return start, end
}

func hostEnd(evs []fleet.Event, host string) *fleet.Event {
	var last *fleet.Event
	for i, e := range evs {
		if (e.Type == fleet.EvHostEnd || e.Type == fleet.EvRevertHost) && e.Host == host {
			last = &evs[i]
		}
	}
	return last
}

// waitFor polls cond every 50 ms until it holds, for at most timeout (a
// bound for a hung run, not a timing assertion), and gives up at once when
// the controller it waits on has exited.
func waitFor(t testing.TB, what string, timeout time.Duration, exited <-chan struct{}, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-exited:
			if cond() {
				return
			}
			t.Fatalf("the controller exited before: %s", what)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// started is a controller running in the background; Wait's error is
// kept for the test.
type started struct {
	cmd    *exec.Cmd
	out    strings.Builder
	exited chan struct{}
	err    error
	// dirs are the ssh control dirs before it started: a killed controller
	// cannot remove its own (its masters end after controlPersist).
	dirs map[string]bool
	f    *testFleet
}

func (f *testFleet) controlDirs() map[string]bool {
	m, _ := filepath.Glob(filepath.Join(f.tmp, "mcpctl-ssh-*"))
	out := map[string]bool{}
	for _, d := range m {
		out[d] = true
	}
	return out
}

func (f *testFleet) start(t testing.TB, ctx context.Context, args ...string) *started {
	t.Helper()
	s := &started{cmd: f.command(ctx, args...), exited: make(chan struct{}), dirs: f.controlDirs(), f: f}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	return s
}

func (s *started) kill(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	for d := range s.f.controlDirs() {
		if !s.dirs[d] {
			_ = os.RemoveAll(d)
		}
	}
}

func restartedOnly(names ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// TestFleetInContainers runs the fleet scenarios against three real hosts,
// one after the other on the same fleet, each from the state the previous
// left (asserted).
func TestFleetInContainers(t *testing.T) {
	f := newTestFleet(t, 3)
	h1, h2, h3 := f.hosts[0].Name, f.hosts[1].Name, f.hosts[2].Name
	v1 := filepath.Join(f.hosts[0].Dir, "bin", "mcp-backend-v1")
	v2, v3, v4, v5 := f.build("v2"), f.build("v3"), f.build("v4"), f.build("v5")
	all := func(b string) map[string]string { return map[string]string{h1: b, h2: b, h3: b} }
	before := f.states(t)

	t.Run("a changed host key on one host: nothing changes on any host", func(t *testing.T) {
		_, otherKey := nspawntest.SSHKey(t, t.TempDir(), "impostor")
		k := strings.Fields(otherKey)
		f.writeKnownHosts(map[string]string{h2: fmt.Sprintf("[127.0.0.1]:%d %s %s", f.hosts[1].SSHD.Port, k[0], k[1])})
		defer f.writeKnownHosts(nil)
		inv := f.inventory("hostkey", nil)
		code, out := f.fleetRun(t, "fleet", "rollout", "--inventory", inv, "--build", v2, "--version", "v2")
		if code != 1 || !strings.Contains(out, "Host key verification failed") || !strings.Contains(out, "nothing changed on any host") {
			t.Fatalf("exit %d, want 1 naming the host key failure", code)
		}
		before = f.expect(t, before, all(v1), nil)
		for _, h := range f.hosts {
			if _, err := os.Stat(h.FleetDir()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: fleet dir exists (%v): something was uploaded", h.Name, err)
			}
		}
		if evs := events(t, inv); len(evs) != 0 {
			t.Errorf("the refused rollout logged %d events, want none", len(evs))
		}
	})

	t.Run("two entries reaching one machine: the plan names the mis-wiring", func(t *testing.T) {
		// "localhost" at host1's port is host1 again (its own key, so ssh
		// itself is content): only the machine-id tells.
		f.writeKnownHosts(nil)
		kh, err := os.ReadFile(f.knownHosts)
		if err != nil {
			t.Fatal(err)
		}
		h := f.hosts[0]
		again := strings.Replace(h.SSHD.KnownHost, "[127.0.0.1]", "[localhost]", 1)
		if err := os.WriteFile(f.knownHosts, append(kh, []byte(again+"\n")...), 0o600); err != nil {
			t.Fatal(err)
		}
		defer f.writeKnownHosts(nil)
		inv := f.inventory("miswired", nil)
		var doc map[string]any
		b, _ := os.ReadFile(inv)
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		doc["hosts"] = append(doc["hosts"].([]any), map[string]any{"name": "host4", "address": "localhost", "port": h.SSHD.Port,
			"config": h.CfgPath, "agent": h.Mcpctl(), "fleetDir": h.FleetDir()})
		nspawntest.WriteJSON(t, inv, doc)
		code, out := f.fleetRun(t, "fleet", "plan", "--inventory", inv)
		if code != 1 || !strings.Contains(out, "host4: same machine") || !strings.Contains(out, "as host host1: a mis-wired address or port") {
			t.Fatalf("exit %d, want 1 naming host4 as host1's machine", code)
		}
		before = f.expect(t, before, all(v1), nil)
	})

	t.Run("clean rollout over 3 hosts in waves [1, 50%, 100%]", func(t *testing.T) {
		inv := f.inventory("clean", nil)
		code, out := f.fleetRun(t, "fleet", "rollout", "--inventory", inv, "--build", v2, "--version", "v2")
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		before = f.expect(t, before, all(v2), restartedOnly(h1, h2, h3))
		evs := events(t, inv)
		// Wave 2 started only after host1 was verified, and its two hosts
		// ran at the same time: their stress runs overlap by the hosts'
		// own clocks.
		_, c1 := stepSpan(evs, h1, "cutover")
		s2, e2 := stepSpan(evs, h2, "stress")
		s3, e3 := stepSpan(evs, h3, "stress")
		if c1.IsZero() || s2.IsZero() || s3.IsZero() {
			t.Fatalf("missing step times in the run log")
		}
		if !s2.After(c1) || !s3.After(c1) {
			t.Errorf("wave 2 started before wave 1 ended: host1 cutover ended %s, stress %s %s", c1, s2, s3)
		}
		if !s2.Before(e3) || !s3.Before(e2) {
			t.Errorf("wave 2 did not run in parallel: %s stress %s-%s, %s stress %s-%s", h2, s2, e2, h3, s3, e3)
		}
		for _, h := range []string{h1, h2, h3} {
			if e := hostEnd(evs, h); e == nil || e.Outcome != fleet.Verified {
				t.Errorf("%s: host-end %+v, want verified", h, e)
			}
		}
		if !strings.Contains(out, "every host runs v2") {
			t.Errorf("no summary line")
		}
		// fleet status sees every host on v2, healthy, nothing pending.
		code, out = f.fleetRun(t, "fleet", "status", "--inventory", inv, "--json")
		var st struct {
			Hosts []struct {
				Host  string
				Facts *fleet.Facts
			}
		}
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Hosts) != 3 {
			t.Fatalf("status: exit %d, %v", code, err)
		}
		d2, _ := buildinfo.FileDigest(v2)
		for _, h := range st.Hosts {
			if h.Facts == nil || !h.Facts.On(d2) || h.Facts.Version != "v2" || len(h.Facts.Tunnels) != 2 {
				t.Errorf("status of %s: %+v, want v2 verified", h.Host, h.Facts)
			}
		}
		// And for people: one row per host.
		code, out = f.fleetRun(t, "fleet", "status", "--inventory", inv)
		if code != 0 || strings.Count(out, " healthy ") != 3 || strings.Count(out, "2/2 active") != 3 || !strings.Contains(out, "every host runs v2") {
			t.Errorf("status table: exit %d, want 0 with three healthy hosts, tunnels up, the last run", code)
		}
		// A second rollout of the same build skips every host.
		code, out = f.fleetRun(t, "fleet", "plan", "--inventory", inv, "--build", v2, "--version", "v2")
		if code != 0 || strings.Count(out, "skip: already on it") != 3 {
			t.Errorf("plan after the rollout: exit %d, want 0 and every host skipped", code)
		}
	})

	t.Run("wave-2 host fails verification, revert: wave 1 rolled back, fleet as it was", func(t *testing.T) {
		undo := f.hosts[1].FailCutoverOn(t, "v3")
		defer undo()
		inv := f.inventory("revert", map[string]any{"waves": []any{1, "100%"}, "parallelism": 1})
		code, _ := f.fleetRun(t, "fleet", "rollout", "--inventory", inv, "--build", v3, "--version", "v3")
		if code != fleet.CodeReverted {
			t.Fatalf("exit %d, want %d (reverted)", code, fleet.CodeReverted)
		}
		evs := events(t, inv)
		if e := hostEnd(evs, h2); e == nil || e.Outcome != fleet.RolledBack {
			t.Errorf("%s: %+v, want rolled-back", h2, e)
		}
		if e := hostEnd(evs, h1); e == nil || e.Outcome != fleet.Reverted {
			t.Errorf("%s: %+v, want reverted", h1, e)
		}
		// host3 comes after host2 in wave 2 (parallelism 1): once host2
		// failed, it never started.
		if e := hostEnd(evs, h3); e != nil {
			t.Errorf("%s: %+v, want never started", h3, e)
		}
		// host2's v3 failed in its idle slot: its serving process was
		// never touched.
		before = f.expect(t, before, all(v2), restartedOnly(h1))
	})

	t.Run("wave-2 host fails verification, halt: wave 1 stays, the printed resume finishes", func(t *testing.T) {
		undo := f.hosts[1].FailCutoverOn(t, "v3")
		inv := f.inventory("halt", map[string]any{"onFailure": "halt"})
		code, out := f.fleetRun(t, "fleet", "rollout", "--inventory", inv, "--build", v3, "--version", "v3")
		if code != fleet.CodeMixed {
			t.Fatalf("exit %d, want %d (halted)", code, fleet.CodeMixed)
		}
		resume := "mcpctl fleet resume --inventory " + inv
		if !strings.Contains(out, resume) || !strings.Contains(out, "mcpctl fleet rollback --inventory "+inv) {
			t.Fatalf("the halt does not print the resume and rollback commands")
		}
		before = f.expect(t, before, map[string]string{h1: v3, h2: v2, h3: v3}, restartedOnly(h1, h3))
		undo()
		args := strings.Fields(strings.TrimPrefix(resume, "mcpctl "))
		code, _ = f.fleetRun(t, args...)
		if code != 0 {
			t.Fatalf("resume: exit %d, want 0", code)
		}
		before = f.expect(t, before, all(v3), restartedOnly(h2))
		evs := events(t, inv)
		if e := hostEnd(evs, h2); e == nil || e.Outcome != fleet.Verified {
			t.Errorf("%s after resume: %+v, want verified", h2, e)
		}
		// fleet rollback takes the run back: every host it cut over
		// returns to the snapshot the run took there.
		code, _ = f.fleetRun(t, "fleet", "rollback", "--inventory", inv)
		if code != 0 {
			t.Fatalf("fleet rollback: exit %d, want 0", code)
		}
		before = f.expect(t, before, all(v2), restartedOnly(h1, h2, h3))
	})

	t.Run("controller SIGKILLed mid-wave, fleet resume finishes", func(t *testing.T) {
		inv := f.inventory("kill", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		run := f.start(t, ctx, "fleet", "rollout", "--inventory", inv, "--build", v4, "--version", "v4", "--json")
		// Kill it once a wave-2 cutover has started on its host.
		waitFor(t, "a wave-2 cutover started", 5*time.Minute, run.exited, func() bool {
			for _, e := range events(t, inv) {
				if e.Type == fleet.EvStepStart && e.Wave == 2 && e.Step == "cutover" {
					return true
				}
			}
			return false
		})
		run.kill(t)
		t.Logf("killed controller's output:\n%s", run.out.String())
		killedAt := len(events(t, inv))
		code, _ := f.fleetRun(t, "fleet", "resume", "--inventory", inv)
		if code != 0 {
			t.Fatalf("resume: exit %d, want 0", code)
		}
		before = f.expect(t, before, all(v4), restartedOnly(h1, h2, h3))
		// The resumed run did not touch host1 (done before the kill).
		for _, e := range events(t, inv)[killedAt:] {
			if e.Host == h1 && e.Type == fleet.EvStepStart {
				t.Errorf("resume started %s on %s, which was done", e.Step, h1)
			}
		}
	})

	t.Run("controller SIGKILLed during a cutover, fleet rollback takes the run back", func(t *testing.T) {
		inv := f.inventory("kill-rollback", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		run := f.start(t, ctx, "fleet", "rollout", "--inventory", inv, "--build", v5, "--version", "v5")
		// The log says step-start before the step reaches the host (by
		// design): killed in between, the host never ran the cutover and
		// there is nothing to take back. Wait until the host runs it: its
		// lock held by the cutover, the cutover armed, or done.
		host1 := f.hosts[0]
		waitFor(t, "host1's cutover started on host1", 5*time.Minute, run.exited, func() bool {
			logged := false
			for _, e := range events(t, inv) {
				if e.Type == fleet.EvStepStart && e.Host == h1 && e.Step == "cutover" {
					logged = true
				}
			}
			if !logged {
				return false
			}
			sd := state.Dir(host1.Cfg.StateDir)
			if hd := sd.ReadHolder(); hd != nil && strings.HasPrefix(hd.Owner, "cutover") {
				return true
			}
			p, _ := sd.ReadPending()
			v, _ := (&release.Store{Root: host1.Cfg.Install.Root}).Current()
			return p != nil || v == "v5"
		})
		run.kill(t)
		// The log knows nothing of the cutover's outcome; the host does.
		code, _ := f.fleetRun(t, "fleet", "rollback", "--inventory", inv)
		if code != 0 {
			t.Fatalf("fleet rollback: exit %d, want 0", code)
		}
		before = f.expect(t, before, all(v4), restartedOnly(h1))
		if e := hostEnd(events(t, inv), h1); e == nil || e.Outcome != fleet.Reverted {
			t.Errorf("%s: %+v, want reverted", h1, e)
		}
	})

	t.Run("sshd stopped after the cutover was armed: the host decides, the run reports it failed", func(t *testing.T) {
		h := f.hosts[0]
		inv := f.inventory("sshd", map[string]any{"onFailure": "halt"})
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		run := f.start(t, ctx, "fleet", "rollout", "--inventory", inv, "--build", v5, "--version", "v5")
		waitFor(t, "host1's cutover armed", 3*time.Minute, run.exited, func() bool {
			p, _ := state.Dir(h.Cfg.StateDir).ReadPending()
			return p != nil && p.ToVersion == "v5"
		})
		h.SSHD.Stop(t)
		<-run.exited
		t.Logf("rollout:\n%s", run.out.String())
		var ee *exec.ExitError
		if !errors.As(run.err, &ee) || ee.ExitCode() != fleet.CodeMixed {
			t.Fatalf("rollout: %v, want exit %d (halted after wave 1)", run.err, fleet.CodeMixed)
		}
		if !strings.Contains(run.out.String(), "unreachable") {
			t.Errorf("the run does not report host1 unreachable")
		}
		// The host ends on its own: verified on v5, or rolled back to v4 by
		// its armed timer; never pending.
		waitFor(t, "host1 no longer pending", 3*time.Minute, nil, func() bool {
			p, _ := state.Dir(h.Cfg.StateDir).ReadPending()
			return p == nil
		})
		s := h.state(t)
		d4, _ := buildinfo.FileDigest(v4)
		d5, _ := buildinfo.FileDigest(v5)
		if s.Digest != d4 && s.Digest != d5 {
			t.Errorf("host1 runs %s, want v4 or v5", s.Version)
		}
		t.Logf("host1 ended on %s", s.Version)
		want := map[string]string{h1: v4, h2: v4, h3: v4}
		if s.Digest == d5 {
			want[h1] = v5
		}
		before = f.expect(t, before, want, restartedOnly(h1))

		// With sshd back, resume reads host1's cutover outcome from the
		// host and finishes the run.
		h.SSHD.Start(t)
		n := len(events(t, inv))
		code, _ := f.fleetRun(t, "fleet", "resume", "--inventory", inv)
		if code != 0 {
			t.Fatalf("resume: exit %d, want 0", code)
		}
		restarted := restartedOnly(h2, h3)
		if s.Digest != d5 {
			restarted[h1] = true // rolled back by its timer: the resume cut it over again
		}
		before = f.expect(t, before, all(v5), restarted)
		if s.Digest == d5 {
			for _, e := range events(t, inv)[n:] {
				if e.Host == h1 && e.Type == fleet.EvStepStart {
					t.Errorf("resume started %s on %s, whose cutover had verified", e.Step, h1)
				}
			}
		}
	})
}
