package systemd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/systemd"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func healthz(t testing.TB, addr string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET %s/healthz: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("GET %s/healthz = %d %s", addr, resp.StatusCode, body)
	}
}

// TestUnitsInRealSystemd installs the rendered units into a real systemd,
// starts the real mcp-backend through Type=notify, checks every guardrail as
// systemd reports it, and restarts the backend under two tunnels that must
// keep running and answer again.
func TestUnitsInRealSystemd(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	root := filepath.Join(work, "opt", "mcp-backend")
	backendBin := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v-it-1")
	nspawntest.CopyExecutable(t, backendBin, filepath.Join(root, "releases", "v-it-1", "mcp-backend"))
	if err := os.Symlink(filepath.Join(root, "releases", "v-it-1"), filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	// Production is the boot slot, which runs the release its link names.
	if err := os.MkdirAll(filepath.Join(root, "slots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "releases", "v-it-1"), units.SlotLink(root, units.BootSlot)); err != nil {
		t.Fatal(err)
	}
	mcpctl := filepath.Join(work, "bin", "mcpctl")
	writeFile(t, mcpctl, "#!/bin/sh\nexit 0\n", 0o755) // the units name it; this test never runs it

	backendAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	cfg := ctlconfig.Default()
	cfg.Install.Root = root
	cfg.Backend.Listen = backendAddr
	cfg.Backend.Config = filepath.Join(work, "etc", "config.json")
	cfg.Canary.Config = filepath.Join(work, "etc", "canary.json")
	cfg.Canary.Listen = fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	writeFile(t, cfg.Backend.Config, fmt.Sprintf(`{"listen": %q}`, backendAddr), 0o644)
	var tunnelAddrs []string
	for i := range cfg.Tunnels {
		addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
		tunnelAddrs = append(tunnelAddrs, addr)
		cfg.Tunnels[i].URL = "http://" + addr
		_, port, _ := net.SplitHostPort(addr)
		cfg.Tunnels[i].Exec = fmt.Sprintf("/usr/bin/socat TCP-LISTEN:%s,bind=127.0.0.1,reuseaddr,fork TCP:%s", port, backendAddr)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rendered, err := units.Render(units.Params{Spec: unitSpec(t, cfg), MCPCtl: mcpctl})
	if err != nil {
		t.Fatal(err)
	}

	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{work}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sd := m.Client
	if _, err := m.Exec(ctx, "test", "-x", "/usr/bin/socat"); err != nil {
		nspawntest.SkipOrFail(t, "socat is needed for the tunnel units (Debian: apt-get install socat): %v", err)
	}
	for _, u := range rendered {
		writeFile(t, filepath.Join(m.UnitsDir, u.Name), string(u.Content), 0o644)
	}
	if err := sd.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}

	prod := units.SlotUnit(cfg.Backend.Unit, units.BootSlot)
	t.Run("enable", func(t *testing.T) {
		var enable []string
		for _, u := range rendered {
			if u.Enable {
				enable = append(enable, u.Name)
			}
		}
		if err := sd.Enable(ctx, enable...); err != nil {
			t.Fatal(err)
		}
		for _, name := range enable {
			if name == units.SlotTemplate(cfg.Backend.Unit) {
				name = prod // a template has no state; its DefaultInstance is enabled
			}
			st, err := sd.Unit(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if st.UnitFileState != "enabled" {
				t.Errorf("%s: UnitFileState = %q, want enabled", name, st.UnitFileState)
			}
		}
		if _, err := os.Lstat(filepath.Join(m.UnitsDir, "multi-user.target.wants", prod)); err != nil {
			t.Errorf("no enablement symlink for the backend: %v", err)
		}
	})

	if err := sd.Start(ctx, prod); err != nil {
		t.Fatalf("start the backend: %v", err)
	}
	be, err := sd.Unit(ctx, prod)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("backend ready through notify", func(t *testing.T) {
		if be.Type != "notify" || be.ActiveState != "active" || be.SubState != "running" || be.MainPID == 0 {
			t.Fatalf("backend = type %s %s/%s pid %d, want notify active/running", be.Type, be.ActiveState, be.SubState, be.MainPID)
		}
		if be.FragmentPath != "/etc/systemd/system/"+units.SlotTemplate(cfg.Backend.Unit) {
			t.Errorf("FragmentPath = %s", be.FragmentPath)
		}
		healthz(t, backendAddr)
	})

	t.Run("guardrails", func(t *testing.T) {
		g := cfg.Guardrails
		high, _ := units.ParseSize(g.MemoryHigh)
		max, _ := units.ParseSize(g.MemoryMax)
		tests := []struct {
			name      string
			got, want uint64
		}{
			{"MemoryHigh", be.MemoryHigh, high},
			{"MemoryMax", be.MemoryMax, max},
			{"MemoryMax is 9G", be.MemoryMax, 9 << 30},
			{"TasksMax", be.TasksMax, 512},
			{"CPUWeight", be.CPUWeight, 80},
			{"LimitNOFILE", be.LimitNOFILE, 65536},
			{"TimeoutStopSec", uint64(be.TimeoutStop), uint64(5 * time.Second)},
			{"WatchdogSec", uint64(be.Watchdog), uint64(10 * time.Second)},
		}
		for _, tc := range tests {
			if tc.got != tc.want {
				t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
			}
		}
	})

	for _, tu := range cfg.Tunnels {
		if err := sd.Start(ctx, tu.Unit); err != nil {
			t.Fatalf("start %s: %v", tu.Unit, err)
		}
	}
	// socat listens right after exec; wait for that, not for a fixed time.
	for _, addr := range tunnelAddrs {
		waitListening(t, ctx, addr)
		healthz(t, addr)
	}

	t.Run("backend restart leaves tunnels alone", func(t *testing.T) {
		before := map[string]*unitstate.State{}
		for _, tu := range cfg.Tunnels {
			st, err := sd.Unit(ctx, tu.Unit)
			if err != nil {
				t.Fatal(err)
			}
			if st.ActiveState != "active" || st.MainPID == 0 || st.InvocationID == "" {
				t.Fatalf("%s before: %+v", tu.Unit, st)
			}
			before[tu.Unit] = st
		}
		if err := sd.Restart(ctx, prod); err != nil {
			t.Fatal(err)
		}
		after, err := sd.Unit(ctx, prod)
		if err != nil {
			t.Fatal(err)
		}
		if after.InvocationID == be.InvocationID || after.MainPID == be.MainPID || after.ActiveState != "active" {
			t.Fatalf("backend not restarted: before %s pid %d, after %s pid %d %s",
				be.InvocationID, be.MainPID, after.InvocationID, after.MainPID, after.ActiveState)
		}
		if after.NRestarts != 0 {
			t.Errorf("backend NRestarts = %d: it crashed", after.NRestarts)
		}
		for _, tu := range cfg.Tunnels {
			st, err := sd.Unit(ctx, tu.Unit)
			if err != nil {
				t.Fatal(err)
			}
			b := before[tu.Unit]
			if st.InvocationID != b.InvocationID || st.MainPID != b.MainPID || st.ActiveState != "active" || st.NRestarts != 0 {
				t.Errorf("%s was touched by the backend restart: before %s pid %d, after %s pid %d %s restarts %d",
					tu.Unit, b.InvocationID, b.MainPID, st.InvocationID, st.MainPID, st.ActiveState, st.NRestarts)
			}
		}
		// Ready means serving: through each tunnel at once, no retries.
		for _, addr := range tunnelAddrs {
			healthz(t, addr)
		}
	})

	t.Run("stop within TimeoutStopSec", func(t *testing.T) {
		if err := sd.Stop(ctx, prod); err != nil {
			t.Fatal(err)
		}
		st, err := sd.Unit(ctx, prod)
		if err != nil {
			t.Fatal(err)
		}
		// Result "timeout" would mean systemd had to SIGKILL it.
		if st.ActiveState != "inactive" || st.Result != "success" {
			t.Fatalf("after stop: %s result %s", st.ActiveState, st.Result)
		}
	})
}

func waitListening(t testing.TB, ctx context.Context, addr string) {
	t.Helper()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never listened: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestJobsAndTransientTimers covers job results and the transient timer pair
// the automatic rollback is built on.
func TestJobsAndTransientTimers(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	m := nspawntest.Boot(t, nspawntest.Options{Binds: []string{work}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sd := m.Client

	t.Run("failed job is an error and is reset", func(t *testing.T) {
		writeFile(t, filepath.Join(m.UnitsDir, "broken.service"), "[Service]\nType=oneshot\nExecStart=/bin/false\n", 0o644)
		if err := sd.DaemonReload(ctx); err != nil {
			t.Fatal(err)
		}
		err := sd.Start(ctx, "broken.service")
		var je *systemd.JobError
		if !errors.As(err, &je) || je.Result != "failed" {
			t.Fatalf("err = %v, want a JobError with result failed", err)
		}
		if !strings.Contains(je.State, "failed") {
			t.Errorf("JobError.State = %q, want the failed state named", je.State)
		}
		st, err := sd.Unit(ctx, "broken.service")
		if err != nil {
			t.Fatal(err)
		}
		if st.ActiveState == "failed" {
			t.Fatalf("failed state not reset: %+v", st)
		}
	})

	t.Run("list units, ExecStart, TriggeredBy, UnitFileState", func(t *testing.T) {
		writeFile(t, filepath.Join(m.UnitsDir, "it-exec.service"),
			"[Service]\nExecStart=/bin/sleep 3600\nExecStart=-/bin/true one two\nType=oneshot\nRemainAfterExit=yes\n", 0o644)
		writeFile(t, filepath.Join(m.UnitsDir, "it-exec.timer"), "[Timer]\nOnActiveSec=1h\n[Install]\nWantedBy=timers.target\n", 0o644)
		if err := sd.DaemonReload(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sd.Enable(ctx, "it-exec.timer"); err != nil {
			t.Fatal(err)
		}
		if err := sd.Start(ctx, "it-exec.timer"); err != nil {
			t.Fatal(err)
		}
		list, err := sd.ListUnits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for _, u := range list {
			states[u.Name] = u.LoadState + "/" + u.ActiveState
		}
		if states["it-exec.timer"] != "loaded/active" || states["it-exec.service"] != "loaded/inactive" {
			t.Fatalf("ListUnits: timer %q, service %q; want loaded/active and loaded/inactive", states["it-exec.timer"], states["it-exec.service"])
		}
		cmds, err := sd.ExecStart(ctx, "it-exec.service")
		if err != nil {
			t.Fatal(err)
		}
		want := []unitstate.ExecCommand{{Path: "/bin/sleep", Argv: []string{"/bin/sleep", "3600"}}, {Path: "/bin/true", Argv: []string{"/bin/true", "one", "two"}}}
		if fmt.Sprint(cmds) != fmt.Sprint(want) {
			t.Fatalf("ExecStart = %+v, want %+v", cmds, want)
		}
		by, err := sd.Strings(ctx, "it-exec.service", "TriggeredBy")
		if err != nil || fmt.Sprint(by) != "[it-exec.timer]" {
			t.Fatalf("TriggeredBy = %v, %v; want [it-exec.timer]", by, err)
		}
		for unit, want := range map[string]string{"it-exec.timer": "enabled", "it-exec.service": "static"} {
			if got, err := sd.UnitFileState(ctx, unit); err != nil || got != want {
				t.Errorf("UnitFileState(%s) = %q, %v; want %q", unit, got, err, want)
			}
		}
		if _, err := sd.ExecStart(ctx, "it-exec.timer"); err == nil {
			t.Error("ExecStart of a timer: no error")
		}
		if err := sd.Stop(ctx, "it-exec.timer"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a call that queues no job returns its error", func(t *testing.T) {
		// A missing unit fails in the call itself; waiting on the job
		// channel would hang until the deadline.
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := sd.Start(short, "does-not-exist.service")
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "does-not-exist.service") {
			t.Fatalf("err = %v, want the call's own error", err)
		}
	})

	t.Run("disarmed before it fires", func(t *testing.T) {
		marker := filepath.Join(work, "disarmed-ran")
		tr := unitstate.Transient{
			Timer: "it-disarm.timer", Service: "it-disarm.service", Description: "disarm test",
			Argv: []string{"/usr/bin/touch", marker}, After: time.Hour,
		}
		if err := sd.ArmTransient(ctx, tr); err != nil {
			t.Fatal(err)
		}
		timer, err := sd.Unit(ctx, tr.Timer)
		if err != nil {
			t.Fatal(err)
		}
		if timer.ActiveState != "active" || timer.SubState != "waiting" {
			t.Fatalf("armed timer: %s/%s", timer.ActiveState, timer.SubState)
		}
		show, err := m.Exec(ctx, "systemctl", "show", tr.Timer, "-p", "AccuracyUSec", "-p", "RemainAfterElapse", "-p", "TimersMonotonic", "-p", "Unit")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"AccuracyUSec=1s", "RemainAfterElapse=no", "{ OnActiveUSec=1h ", "Unit=it-disarm.service"} {
			if !strings.Contains(show, want) {
				t.Errorf("timer properties lack %q:\n%s", want, show)
			}
		}
		svc, err := sd.Unit(ctx, tr.Service)
		if err != nil {
			t.Fatal(err)
		}
		if svc.LoadState != "loaded" || svc.ActiveState != "inactive" || svc.Type != "oneshot" {
			t.Fatalf("armed service: %+v", svc)
		}
		if gone, err := sd.Gone(ctx, tr.Timer, tr.Service); err != nil || gone {
			t.Fatalf("Gone while armed = %v, %v", gone, err)
		}
		if err := sd.DisarmTransient(ctx, tr.Timer, tr.Service); err != nil {
			t.Fatal(err)
		}
		if gone, err := sd.Gone(ctx, tr.Timer, tr.Service); err != nil || !gone {
			t.Fatalf("Gone after disarm = %v, %v", gone, err)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("disarmed service ran: %v", err)
		}
		// What is not armed cannot be disarmed: a caller must not mistake
		// a fired timer for a disarmed one.
		if err := sd.DisarmTransient(ctx, tr.Timer, tr.Service); !errors.Is(err, unitstate.ErrAlreadyFired) {
			t.Fatalf("second disarm: %v, want ErrAlreadyFired", err)
		}
	})

	// fire arms tr, whose service creates marker, and waits until the
	// service has run and both units have unloaded by themselves.
	fire := func(t *testing.T, tr unitstate.Transient, marker string) {
		t.Helper()
		if err := sd.ArmTransient(ctx, tr); err != nil {
			t.Fatal(err)
		}
		proctest.Eventually(t, "the armed timer to run its service", func() bool {
			_, err := os.Stat(marker)
			return err == nil
		})
		if err := sd.WaitGone(ctx, tr.Timer, tr.Service); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("left armed it fires and runs its service", func(t *testing.T) {
		marker := filepath.Join(work, "fired")
		tr := unitstate.Transient{
			Timer: "it-fire.timer", Service: "it-fire.service",
			Argv: []string{"/usr/bin/touch", marker}, After: time.Second,
		}
		// RemainAfterElapse=false: once done, both unload by themselves.
		fire(t, tr, marker)
		if err := sd.DisarmTransient(ctx, tr.Timer, tr.Service); !errors.Is(err, unitstate.ErrAlreadyFired) {
			t.Fatalf("disarm after firing: %v, want ErrAlreadyFired", err)
		}
	})

	t.Run("a failed run unloads too and the names can be armed again", func(t *testing.T) {
		marker := filepath.Join(work, "failed-run")
		tr := unitstate.Transient{
			Timer: "it-fail.timer", Service: "it-fail.service",
			Argv: []string{"/bin/sh", "-c", "touch " + marker + "; exit 4"}, After: time.Second,
		}
		// Without CollectMode=inactive-or-failed the failed service stays
		// loaded and blocks arming until someone runs reset-failed.
		fire(t, tr, marker)
		tr.After = time.Hour
		if err := sd.ArmTransient(ctx, tr); err != nil {
			t.Fatalf("arming again after a failed run: %v", err)
		}
		if err := sd.DisarmTransient(ctx, tr.Timer, tr.Service); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("disarm refuses to kill a running service", func(t *testing.T) {
		tr := unitstate.Transient{
			Timer: "it-busy.timer", Service: "it-busy.service",
			Argv: []string{"/bin/sleep", "60"}, After: time.Second,
		}
		if err := sd.ArmTransient(ctx, tr); err != nil {
			t.Fatal(err)
		}
		for {
			st, err := sd.Unit(ctx, tr.Service)
			if err != nil {
				t.Fatal(err)
			}
			if st.ActiveState == "activating" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("service never started: %+v", st)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := sd.DisarmTransient(ctx, tr.Timer, tr.Service); !errors.Is(err, unitstate.ErrAlreadyFired) {
			t.Fatalf("err = %v, want ErrAlreadyFired", err)
		}
		if err := sd.Stop(ctx, tr.Service); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("transient units do not survive a reboot", func(t *testing.T) {
		tr := unitstate.Transient{
			Timer: "it-reboot.timer", Service: "it-reboot.service",
			Argv: []string{"/usr/bin/true"}, After: time.Hour,
		}
		if err := sd.ArmTransient(ctx, tr); err != nil {
			t.Fatal(err)
		}
		m.Reboot(t)
		sd = m.Client
		if gone, err := sd.Gone(ctx, tr.Timer, tr.Service); err != nil || !gone {
			t.Fatalf("Gone after reboot = %v, %v", gone, err)
		}
	})
}

// unitSpec is cfg's unit spec; the test fails when cfg cannot be rendered.
func unitSpec(t testing.TB, cfg *ctlconfig.Config) *units.Spec {
	t.Helper()
	spec, err := cfg.UnitSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
