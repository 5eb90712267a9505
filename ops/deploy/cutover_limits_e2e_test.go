package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/units"
)

// commandsRunningOf counts, in one pass over /proc, the processes whose
// command line is exactly each of argvs, and those of the first in a
// cgroup whose path contains unit: one pass, so that the counts are of
// one moment and their sum is what ran at once. The container's processes
// are the host's too: this is what runs on the host, whichever slot
// started it.
func commandsRunningOf(unit string, argvs ...[]string) (all []int, inUnit int) {
	all = make([]int, len(argvs))
	want := map[string]int{}
	for i, argv := range argvs {
		want[strings.Join(argv, "\x00")+"\x00"] = i
	}
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i, ok := want[string(b)]
		if !ok {
			continue
		}
		all[i]++
		if cg, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup")); err == nil && i == 0 && unit != "" && strings.Contains(string(cg), "/"+unit+"\n") {
			inUnit++
		}
	}
	return all, inUnit
}

// sample is a count of commands running at a time: the shells' in all,
// those in the unit the load watches, and the slow operations' (the
// commands of the units service.control starts).
type sample struct {
	at     time.Time
	n      int
	inUnit int
	ops    int
}

// outcome is one call's end.
type limitCall struct {
	end  time.Time
	tool string
	kind mcpclient.Kind
	code string
}

// slowOpUnit is a template unit whose start job lasts as long as its
// command (a oneshot): a service.control start of an instance holds its
// admission slot for that long, as shell.exec's sleep does.
const slowOpUnit = "mcp-slowop@.service"

// loadMix is what a load runs: shell callers, each keeping a shell.exec
// running, and control callers, each keeping a service.control start of
// its own mcp-slowop@N.service running; and the limits it should reach.
type loadMix struct {
	shells, controls    int
	maxShell, maxActive int
}

// shellLoad keeps shell.exec (and, in a mix, service.control) saturated
// through both tunnels: each shell command sleeping 3.7 s (a slow
// operation's 7.4 s), a conversation per
// caller, each call its own connection (as a tunnel forwards each client
// connection). It samples the commands running every 200 ms.
type shellLoad struct {
	t       testing.TB
	argv    []string // the shells' command
	opArgv  []string // the slow operations' command
	mu      sync.Mutex
	samples []sample
	metrics []metricsLine
	calls   []limitCall
	unit    atomic.Value // string: the unit whose commands are counted apart
	stop    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

// metricsLine is production's /metrics at a time, in short.
type metricsLine struct {
	at   time.Time
	line string
}

// pollMetrics reads production's /metrics every 500 ms: what each slot
// that answers holds and queues, and its busiest flows, for the log of a
// failure.
func (l *shellLoad) pollMetrics(listen string) {
	defer l.wg.Done()
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	tk := time.NewTicker(500 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tk.C:
		}
		line := "no answer"
		if resp, err := c.Get("http://" + listen + "/metrics"); err == nil {
			var m mcpwire.Metrics
			if json.NewDecoder(resp.Body).Decode(&m) == nil {
				line = fmt.Sprintf("active %+v queued %+v", m.Active, m.Queued)
				if m.Service != nil {
					line += fmt.Sprintf(" service{procs %d active %+v queued %+v yielded %d}", m.Service.Processes, m.Service.Active, m.Service.Queued, m.Service.Yielded)
				}
				if m.Flows != nil {
					for _, f := range m.Flows.Top {
						line += fmt.Sprintf(" [%s a%d q%d %.1fs]", f.Conversation, f.Active, f.Queued, f.ServedSeconds)
					}
				}
			}
			_ = resp.Body.Close()
		}
		l.mu.Lock()
		l.metrics = append(l.metrics, metricsLine{time.Now(), line})
		l.mu.Unlock()
	}
}

// metricsIn is the /metrics lines read in [from, to).
func (l *shellLoad) metricsIn(from, to time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.metrics {
		if !m.at.Before(from) && m.at.Before(to) {
			out = append(out, m.at.Format("15:04:05.000")+" "+m.line)
		}
	}
	return out
}

// startShellLoad keeps shell.exec alone saturated: 24 callers.
func startShellLoad(t testing.TB, s *site, maxShell int) *shellLoad {
	return startLoad(t, s, loadMix{shells: 24, maxShell: maxShell})
}

// installSlowOp installs slowOpUnit in the container, running argv.
func installSlowOp(t testing.TB, s *site, argv []string) {
	t.Helper()
	unit := "[Unit]\nDescription=a slow operation for the limits test (%i)\n\n[Service]\nType=oneshot\nExecStart=" + strings.Join(argv, " ") + "\n"
	if err := os.WriteFile(filepath.Join(s.M.UnitsDir, slowOpUnit), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.M.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
}

// startLoad starts mix's callers and the sampler, and returns once the
// commands running reached mix's limits (both, in a mix).
func startLoad(t testing.TB, s *site, mix loadMix) *shellLoad {
	marker := fmt.Sprintf("%03d", os.Getpid()%1000)
	// The slow operations last twice the shells' length: half the unit
	// starts a second keep systemd from being the bottleneck.
	l := &shellLoad{t: t, argv: []string{"sleep", "3.7" + marker}, opArgv: []string{"/bin/sleep", "7.4" + marker}, stop: make(chan struct{})}
	if mix.controls > 0 {
		installSlowOp(t, s, l.opArgv)
	}
	l.unit.Store("")
	l.wg.Add(1)
	go l.pollMetrics(s.Cfg.Backend.Listen)
	command := "exec " + strings.Join(l.argv, " ")
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			n, in := commandsRunningOf(l.unit.Load().(string), l.argv, l.opArgv)
			l.mu.Lock()
			l.samples = append(l.samples, sample{time.Now(), n[0], in, n[1]})
			l.mu.Unlock()
			select {
			case <-l.stop:
				return
			case <-tk.C:
			}
		}
	}()
	targets := []string{s.Cfg.Tunnels[0].URL, s.Cfg.Tunnels[1].URL}
	caller := func(i int, tool string, args map[string]any, conversation string) {
		defer l.wg.Done()
		c := &mcpclient.Client{HTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}}
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			r := c.CallToolIn(ctx, targets[i%2], tool, args, conversation)
			cancel()
			l.mu.Lock()
			l.calls = append(l.calls, limitCall{time.Now(), tool, r.Kind, r.Code})
			l.mu.Unlock()
		}
	}
	for i := range mix.shells {
		l.wg.Add(1)
		go caller(i, mcpwire.ToolShellExec, map[string]any{"command": command, "timeoutMs": 60000}, fmt.Sprintf("caller-%d", i))
	}
	for i := range mix.controls {
		l.wg.Add(1)
		go caller(i, mcpwire.ToolServiceControl, map[string]any{"unit": fmt.Sprintf("mcp-slowop@%d.service", i), "action": "start"}, fmt.Sprintf("control-%d", i))
	}
	t.Cleanup(l.Stop)
	// Saturated before anything else.
	warm := time.Now()
	for end := warm.Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		p := l.peakIn(warm, time.Now())
		if p.shells >= mix.maxShell && (mix.controls == 0 || p.total >= mix.maxActive) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("never saturated: %d shell commands at most, %d commands in all", p.shells, p.total)
		}
	}
	return l
}

// Stop ends the load and waits for every caller's last call.
func (l *shellLoad) Stop() {
	if !l.stopped {
		l.stopped = true
		close(l.stop)
		l.wg.Wait()
	}
}

// peak is the most commands running in a sample of a span: shell
// commands, and shell commands and slow operations together; and the
// samples taken.
type peak struct {
	shells, total, samples int
}

// peakIn is the peak of the samples in [from, to).
func (l *shellLoad) peakIn(from, to time.Time) (p peak) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.samples {
		if !x.at.Before(from) && x.at.Before(to) {
			p.shells, p.total, p.samples = max(p.shells, x.n), max(p.total, x.n+x.ops), p.samples+1
		}
	}
	return p
}

// checkCalls logs the outcomes per tool and, when strict, fails the test
// for a transport error or an OVERLOADED: the callers, one call each at a
// time, are fewer than concurrency.maxActive + maxQueue (48 + 64), so the
// queue is never full.
func (l *shellLoad) checkCalls(strict bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byOutcome := map[string]int{}
	for _, c := range l.calls {
		k := c.tool + " " + string(c.kind)
		if c.code != "" {
			k += " " + c.code
		}
		byOutcome[k]++
		if !strict {
			continue
		}
		if c.kind == mcpclient.KindTransport {
			l.t.Errorf("a %s call failed in transport at %v", c.tool, c.end)
		}
		if c.code == string(mcpwire.CodeOverloaded) {
			l.t.Errorf("a %s call was refused OVERLOADED at %v: the callers never fill the queue of 64", c.tool, c.end)
		}
	}
	l.t.Logf("figures: %d calls: %v", len(l.calls), byOutcome)
}

// TestCutoverHoldsTheServiceBudget keeps the service saturated through both
// tunnels with a mix of tools, 24 callers of shell.exec and 40 of
// service.control (each starting a oneshot unit of its own whose command
// runs 7.4 s), across a good cutover, a `rollback --last`
// and a cutover whose verification fails, and samples the commands running
// in the container every 200 ms: while two slots run, they hold one
// budget, so the peak of every phase is at most concurrency.maxShell (8)
// shell commands and concurrency.maxActive (48) commands in all, not twice
// that (the per-process limits before showed 16 shells). Before the first
// cutover the load reaches both limits (the test could see them passed).
// No caller sees a transport error, and none OVERLOADED. The peaks are
// logged per phase.
func TestCutoverHoldsTheServiceBudget(t *testing.T) {
	// The defaults the site runs with: concurrency.maxShell and maxActive.
	const maxShell, maxActive = 8, 48
	s := newSite(t, 60*time.Second)
	s.Pass(s.Build("v2"))
	wrong := writeWrongVersion(t, s, s.Build("v3"), s.Builds["v1"])
	warm := time.Now()
	load := startLoad(t, s, loadMix{shells: 24, controls: 40, maxShell: maxShell, maxActive: maxActive})
	type phaseRun struct {
		name       string
		start, end time.Time
	}
	runs := []phaseRun{{"steady, one slot", warm, time.Now()}}
	for _, st := range []struct {
		name string
		code int
		args []string
	}{
		{"cutover v1->v2", 0, []string{"cutover", "--build", s.Builds["v2"], "--arm-rollback"}},
		{"rollback --last v2->v1", 0, []string{"rollback", "--last"}},
		{"cutover failing verification", 3, []string{"cutover", "--build", wrong, "--arm-rollback", "--deadline", "30s", "--skip-canary-check", "e2e: fails verification"}},
	} {
		start := time.Now()
		code, out := s.Run(st.args...)
		if code != st.code {
			t.Fatalf("%s: exit %d, want %d:\n%s\nproduction's /metrics meanwhile:\n%s", st.name, code, st.code, out, strings.Join(load.metricsIn(start, time.Now()), "\n"))
		}
		t.Logf("%s: exit %d in %v", st.name, code, time.Since(start).Round(time.Millisecond))
		// A parked slot's last calls and the callers' move to the new one
		// end within a few commands' length: the phase runs until then.
		time.Sleep(8 * time.Second)
		runs = append(runs, phaseRun{st.name, start, time.Now()})
	}
	load.Stop()
	var overall peak
	for _, r := range runs {
		p := load.peakIn(r.start, r.end)
		overall.shells, overall.total = max(overall.shells, p.shells), max(overall.total, p.total)
		t.Logf("figures: %s: peak of shell commands running %d, of commands in all %d (%d samples over %v)", r.name, p.shells, p.total, p.samples, r.end.Sub(r.start).Round(time.Millisecond))
		if p.shells > maxShell {
			t.Errorf("%s: %d shell commands ran at once, want at most concurrency.maxShell %d", r.name, p.shells, maxShell)
		}
		if p.total > maxActive {
			t.Errorf("%s: %d commands ran at once, want at most concurrency.maxActive %d", r.name, p.total, maxActive)
		}
	}
	t.Logf("figures: peak over the run: %d shell commands, %d in all", overall.shells, overall.total)
	load.checkCalls(true)
}

// TestSlotKilledDuringHandoffLeavesTheBudget SIGKILLs the old slot's main
// process while it hands off under saturated shell.exec load: its record
// in the ledger loses its lock with it, systemd kills the commands left in
// its cgroup, and the new slot then runs the whole shell budget itself.
// The commands running never exceed concurrency.maxShell, the dead one's
// included; how long the survivor took to run all 8 is logged.
func TestSlotKilledDuringHandoffLeavesTheBudget(t *testing.T) {
	const maxShell = 8
	s := newSite(t, 60*time.Second)
	s.Pass(s.Build("v2"))
	old, _, _ := s.Prod()
	newUnit := units.SlotUnit(s.Cfg.Backend.Unit, units.SlotGreen)
	if old == newUnit {
		newUnit = units.SlotUnit(s.Cfg.Backend.Unit, units.SlotBlue)
	}
	load := startShellLoad(t, s, maxShell)
	load.unit.Store(newUnit)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cutover := s.Command(ctx, "cutover", "--build", s.Builds["v2"], "--arm-rollback")
	var out strings.Builder
	cutover.Stdout, cutover.Stderr = &out, &out
	if err := cutover.Start(); err != nil {
		t.Fatal(err)
	}
	status := func(unit string) string {
		o, _ := s.M.Exec(ctx, "systemctl", "show", "-P", "StatusText", unit)
		return strings.TrimSpace(o)
	}
	for end := time.Now().Add(3 * time.Minute); status(old) != mcpwire.SlotHandingOff; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s never handed off:\n%s", old, out.String())
		}
	}
	killed := time.Now()
	if o, err := s.M.Exec(ctx, "systemctl", "kill", "--kill-whom=main", "--signal=SIGKILL", old); err != nil {
		t.Fatalf("kill %s: %v\n%s", old, err, o)
	}
	// The survivor runs all 8 itself.
	var took time.Duration
	for end := killed.Add(2 * time.Minute); took == 0; time.Sleep(100 * time.Millisecond) {
		load.mu.Lock()
		for _, x := range load.samples {
			if x.at.After(killed) && x.inUnit >= maxShell {
				took = x.at.Sub(killed)
				break
			}
		}
		load.mu.Unlock()
		if took == 0 && time.Now().After(end) {
			t.Fatalf("%s never ran %d commands after %s died", newUnit, maxShell, old)
		}
	}
	err := cutover.Wait()
	time.Sleep(8 * time.Second)
	load.Stop()
	p := load.peakIn(killed, time.Now())
	peak, n := p.shells, p.samples
	t.Logf("figures: %s SIGKILLed while handing off; %s ran all %d shell commands %v later; peak of commands running from the kill on %d (%d samples); cutover: %v", old, newUnit, maxShell, took.Round(time.Millisecond), peak, n, err)
	t.Logf("cutover:\n%s", out.String())
	if peak > maxShell {
		t.Errorf("%d shell commands ran at once after the kill, want at most %d", peak, maxShell)
	}
	journal, _ := s.M.Exec(ctx, "journalctl", "-u", newUnit, "-o", "cat", "--no-pager")
	if !strings.Contains(journal, "reclaimed the share of a process that died") {
		t.Errorf("%s logged no reclaim:\n%s", newUnit, journal)
	}
	// The calls the dead process held end in transport errors: that is
	// what SIGKILL does; they are counted, not failed on.
	load.checkCalls(false)
}

// memoryOf is the memory guard's part of a backend's /metrics.
func memoryOf(t testing.TB, base string) (mem struct {
	Enabled  bool  `json:"enabled"`
	Shedding bool  `json:"shedding"`
	Anon     int64 `json:"anon"`
	High     int64 `json:"highWater"`
	Service  *struct {
		Cgroup    string `json:"cgroup"`
		Anon      int64  `json:"anon"`
		Limit     int64  `json:"limit"`
		HighWater int64  `json:"highWater"`
	} `json:"service"`
}) {
	t.Helper()
	r, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Memory json.RawMessage `json:"memory"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc.Memory, &mem); err != nil {
		t.Fatal(err)
	}
	return mem
}

// TestTwoSlotsRefuseTogetherAboveTheSlicesMemoryMark runs the second slot
// in standby beside production (as a cutover does before its takeover),
// lowers the slots' slice's MemoryHigh to 600M for the test, and has a
// shell.exec in production hold 520 MiB: the slice is above its high mark
// (85 %) while each slot's own cgroup is far below its own (6G), so only a
// guard that measures the service sees it. Both slots refuse normal work
// with OVERLOADED, the standby one included, whose own cgroup holds a few
// MiB; control work goes on; once the memory is freed both take work again.
func TestTwoSlotsRefuseTogetherAboveTheSlicesMemoryMark(t *testing.T) {
	s := newSite(t, 60*time.Second)
	if !memoryOf(t, s.Backend).Enabled {
		// A host on cgroup v1 or hybrid boots its containers so too: the
		// guard is off there (the unit test reads files shaped like the
		// slice instead).
		t.Skip("the memory guard is off in the container: no cgroup v2 memory controller")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prod, _, _ := s.Prod()
	other := standbySlot(s, prod)
	standby := proctest.FreeAddr(t)
	exec := func(argv ...string) string {
		t.Helper()
		out, err := s.M.Exec(ctx, argv...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return out
	}
	slot := units.SlotBlue
	if other == units.SlotUnit(s.Cfg.Backend.Unit, units.SlotGreen) {
		slot = units.SlotGreen
	}
	exec("sh", "-c", fmt.Sprintf("mkdir -p %[1]s && echo MCP_BACKEND_STANDBY=%[2]s > %[1]s/%[3]s.env", units.DefaultStandbyDir, standby, slot))
	exec("systemctl", "start", other)
	standbyURL := "http://" + standby
	s.WaitHTTP(standbyURL+"/healthz", time.Minute)
	exec("systemctl", "set-property", "--runtime", "mcp-backend.slice", "MemoryHigh=600M")
	bases := map[string]string{prod: s.Backend, other: standbyURL}
	for unit, base := range bases {
		proctest.Eventually(t, unit+" measures the slice", func() bool {
			m := memoryOf(t, base)
			return m.Enabled && m.Service != nil && strings.HasSuffix(m.Service.Cgroup, "mcp-backend.slice") && m.Service.Limit == 600<<20
		})
		if m := memoryOf(t, base); m.Shedding {
			t.Fatalf("%s sheds before the memory is taken: %+v", unit, m)
		}
	}
	c := &mcpclient.Client{}
	normal := func(base string) mcpclient.Result {
		return c.CallTool(ctx, base, mcpwire.ToolFileList, map[string]any{"path": "/"})
	}
	hog := []string{"python3", "-c", fmt.Sprintf("import time; b = b'x' * (520 << 20); time.sleep(300) # %d", os.Getpid())}
	hogDone := make(chan mcpclient.Result, 1)
	go func() {
		hogDone <- c.CallTool(ctx, s.Backend, mcpwire.ToolShellExec, map[string]any{"command": "exec " + hog[0] + " " + hog[1] + " \"" + hog[2] + "\"", "timeoutMs": 600000})
	}()
	for unit, base := range bases {
		proctest.Eventually(t, unit+" sheds", func() bool { return memoryOf(t, base).Shedding })
		m := memoryOf(t, base)
		t.Logf("figures: %s sheds: its own anon %d MiB (its mark %d MiB), the slice's %d MiB (its mark %d MiB)", unit, m.Anon>>20, m.High>>20, m.Service.Anon>>20, m.Service.HighWater>>20)
		if m.Anon >= m.High {
			t.Fatalf("%s's own cgroup is above its own mark: the test proves nothing: %+v", unit, m)
		}
		if r := normal(base); r.Code != string(mcpwire.CodeOverloaded) {
			t.Fatalf("%s: a normal call while the slice is above its mark: %+v, want OVERLOADED", unit, r)
		}
		if r := c.CallTool(ctx, base, mcpwire.ToolSystemInfo, nil); !r.OK() {
			t.Fatalf("%s: a control call while shedding: %+v, want it served", unit, r)
		}
	}
	// The memory goes: both take normal work again.
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	want := strings.Join(hog, "\x00") + "\x00"
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	<-hogDone
	for unit, base := range bases {
		proctest.Eventually(t, unit+" recovers", func() bool { return !memoryOf(t, base).Shedding })
		if r := normal(base); r.Code == string(mcpwire.CodeOverloaded) {
			t.Fatalf("%s: a normal call once the memory is freed: %+v", unit, r)
		}
	}
}
