package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/units"
)

// jobCall posts one tools/call to the backend as subject (openai/subject of
// an unauthenticated client) and returns the structured result, or the
// tool error's code and message.
func jobCall(t testing.TB, url, subject, tool string, args any, out any) (code, msg string) {
	t.Helper()
	if te := toolCall(t, url, subject, tool, args, out); te != nil {
		return string(te.Code), te.Message
	}
	return "", ""
}

// toolCall is jobCall returning the whole tool error (nil on success).
func toolCall(t testing.TB, url, subject, tool string, args any, out any) *mcpwire.ToolError {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": tool, "arguments": args, "_meta": map[string]any{"openai/subject": subject, "openai/session": "e2e"}}})
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := (&http.Client{Timeout: 70 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Result struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
			Content           []struct{ Text string }
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: status %d: %.300s", tool, resp.StatusCode, b)
	}
	if r.Result.IsError {
		var env mcpwire.ErrorEnvelope
		if err := json.Unmarshal([]byte(r.Result.Content[0].Text), &env); err != nil || env.Error == nil {
			t.Fatalf("%s: tool error without an envelope: %.300s", tool, b)
		}
		return env.Error
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.StructuredContent, out); err != nil {
			t.Fatal(err)
		}
	}
	return nil
}

func (s *site) job(subject, tool string, args any, out any) {
	s.T.Helper()
	if code, msg := jobCall(s.T, s.Backend, subject, tool, args, out); code != "" {
		s.T.Fatalf("%s: %s: %s", tool, code, msg)
	}
}

// allOutput reads a stream of a job from offset 0 to its end by job.output.
func (s *site) allOutput(subject, id, stream string) []byte {
	s.T.Helper()
	var all []byte
	off := int64(0)
	for {
		var c mcpwire.JobChunk
		s.job(subject, mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": stream, "offset": off, "maxBytes": 4096}, &c)
		b := []byte(c.Data)
		if c.Encoding == mcpwire.EncodingBase64 {
			b, _ = base64.StdEncoding.DecodeString(c.Data)
		}
		all = append(all, b...)
		if c.NextOffset == off {
			return all // the end so far (eof once the job ended)
		}
		off = c.NextOffset
	}
}

func (s *site) waitJob(subject, id string) mcpwire.JobStatus {
	s.T.Helper()
	for range 10 {
		var w mcpwire.JobWaitResult
		s.job(subject, mcpwire.ToolJobWait, map[string]any{"id": id, "waitMs": 20000}, &w)
		if w.Job.Done {
			return w.Job
		}
	}
	s.T.Fatalf("job %s still running after 10 waits", id)
	return mcpwire.JobStatus{}
}

// inContainer runs argv inside the container and returns its stdout.
func (s *site) inContainer(argv ...string) string {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, out, _, err := s.M.Run(ctx, argv...)
	if err != nil {
		s.T.Fatalf("%v: %v", argv, err)
	}
	return out
}

// systemdCgroup is the name=systemd (v1) or unified (v2) line of a
// container process's /proc/PID/cgroup.
func (s *site) systemdCgroup(pid int) string {
	s.T.Helper()
	out := s.inContainer("cat", fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ":name=systemd:") {
			return l
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "0::") {
			return l
		}
	}
	s.T.Fatalf("pid %d: no systemd cgroup line in %q", pid, out)
	return ""
}

// pidsOf reads the pids a job printed, one a line.
func pidsOf(t testing.TB, out []byte) []int {
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no pids in %q", out)
	}
	return pids
}

// jobSite is a site whose backend keeps its jobs' state in a bound
// directory (so it outlives a reboot of the container) and caps each job's
// output at 100000 bytes.
func jobSite(t *testing.T) *site {
	s := newSite(t, 60*time.Second)
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "jobs": map[string]any{
		"stateDir": filepath.Join(s.Dir, "jobstate"), "outputBytes": 100000, "totalOutputBytes": 100 << 20,
		"memoryMaxBytes": 1 << 30, "tasksMax": 256,
	}})
	s.restartBackend()
	return s
}

func (s *site) restartBackend() {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	unit, _, _ := s.Prod()
	if err := s.M.Client.Restart(ctx, unit); err != nil {
		s.T.Fatal(err)
	}
	s.WaitHTTP(s.Backend+"/readyz", 20*time.Second)
}

// gated is a job command that prints a tick every 100 ms until the gate
// file exists, then "finished" and exits 7.
func gated(gate string) string {
	return fmt.Sprintf(`i=0; while [ ! -e %s ]; do echo tick $i; i=$((i+1)); sleep 0.1; done; echo finished; exit 7`, gate)
}

func openGate(t testing.TB, gate string) {
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestJobsInSystemd: jobs as transient units in mcp-jobs.slice of a real
// systemd, through the real backend over HTTP: the slice check, the
// job's own cgroup and limits read back over D-Bus, survival of a cutover
// and a rollback (same InvocationID, complete output read from the new
// process), an end while no backend runs, cancel of the whole cgroup, the
// output cap, ownership, and a supervisor killed without a record (lost).
func TestJobsInSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := jobSite(t)
	ctx := context.Background()
	const alice = "alice"

	t.Run("slice missing", func(t *testing.T) {
		s.T = t
		slice := filepath.Join(s.M.UnitsDir, units.JobsSlice)
		body, err := os.ReadFile(slice)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(slice)
		if err := s.M.Client.DaemonReload(ctx); err != nil {
			t.Fatal(err)
		}
		code, msg := jobCall(t, s.Backend, alice, mcpwire.ToolJobStart, map[string]any{"command": "true"}, nil)
		if code != string(mcpwire.CodeUnavailable) || !strings.Contains(msg, "mcpctl unit install") {
			t.Fatalf("without the slice: %s %q", code, msg)
		}
		if err := os.WriteFile(slice, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.M.Client.DaemonReload(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("own unit, cgroup and limits", func(t *testing.T) {
		s.T = t
		var st mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "echo $$; sleep 600 & echo $!; wait",
			"memoryMaxBytes": 256 << 20, "tasksMax": 64, "timeoutMs": 900000, "waitMs": 2000}, &st)
		if st.Job.Mode != mcpwire.JobModeSystemd || st.Job.Unit == "" {
			t.Fatalf("start: %+v", st.Job)
		}
		proctest.Eventually(t, "both pids printed", func() bool { return len(strings.Fields(string(s.allOutput(alice, st.Job.ID, "stdout")))) == 2 })
		u, err := s.M.Client.Unit(ctx, st.Job.Unit)
		if err != nil {
			t.Fatal(err)
		}
		if u.MemoryMax != 256<<20 || u.TasksMax != 64 || u.Slice != units.JobsSlice || u.RuntimeMax < 900*time.Second || u.ActiveState != "active" {
			t.Fatalf("unit %s: MemoryMax %d TasksMax %d Slice %q RuntimeMax %s %s", st.Job.Unit, u.MemoryMax, u.TasksMax, u.Slice, u.RuntimeMax, u.ActiveState)
		}
		pids := pidsOf(t, s.allOutput(alice, st.Job.ID, "stdout"))
		for _, pid := range append(pids, int(u.MainPID)) {
			cg := s.systemdCgroup(pid)
			if !strings.HasSuffix(cg, "/"+units.JobsSlice+"/"+st.Job.Unit) || strings.Contains(cg, units.BackendSlice(s.Cfg.Backend.Unit)) {
				t.Fatalf("pid %d is in %q, want the job's own unit", pid, cg)
			}
		}
		// Cancel stops the whole cgroup, the background sleep included.
		var c mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobCancel, map[string]any{"id": st.Job.ID}, &c)
		if c.State != mcpwire.JobCancelled {
			t.Fatalf("cancel: %+v", c)
		}
		proctest.Eventually(t, "the job's unit gone", func() bool {
			gone, err := s.M.Client.Gone(ctx, st.Job.Unit)
			return err == nil && gone
		})
		for _, pid := range pids {
			if code, _, _, _ := s.M.Run(ctx, "test", "-e", fmt.Sprintf("/proc/%d", pid)); code == 0 {
				t.Fatalf("pid %d of the cancelled job still runs", pid)
			}
		}
	})

	t.Run("survives cutover and rollback", func(t *testing.T) {
		s.T = t
		// Through a tunnel, as a hosted client reaches it; the job runs at
		// least 90 s (the gate opens then, and only after the rollback).
		url := s.Cfg.Tunnels[0].URL
		gate := filepath.Join(s.Dir, "gate-cutover")
		var st mcpwire.JobStartResult
		if code, msg := jobCall(t, url, alice, mcpwire.ToolJobStart, map[string]any{"command": gated(gate)}, &st); code != "" {
			t.Fatalf("job.start through the tunnel: %s %s", code, msg)
		}
		started := time.Now()
		_, inv := s.Unit(st.Job.Unit)
		s.Pass(s.Builds["v2"])
		code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
		if code != 0 || s.Version() != "v2" {
			t.Fatalf("cutover exit %d:\n%s", code, out)
		}
		t.Logf("cutover report:\n%s", out)
		if !strings.Contains(out, "jobs: 1 running before, 1 still running") {
			t.Fatalf("the cutover report does not name the running job:\n%s", out)
		}
		code, out = s.Run("--json", "status")
		var status struct {
			Jobs []deploy.JobUnit `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &status); code != 0 || err != nil || len(status.Jobs) != 1 || status.Jobs[0].Unit != st.Job.Unit {
			t.Fatalf("mcpctl status lists %+v (exit %d, %v), want the job %s", status.Jobs, code, err, st.Job.Unit)
		}
		var mid mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, &mid)
		if active, now := s.Unit(st.Job.Unit); mid.State != mcpwire.JobRunning || active != "active" || now != inv {
			t.Fatalf("after the cutover: %+v, unit %s invocation %s (was %s)", mid, active, now, inv)
		}
		if code, out := s.Run("rollback", "--last"); code != 0 || s.Version() != "v1" {
			t.Fatalf("rollback exit %d:\n%s", code, out)
		}
		if active, now := s.Unit(st.Job.Unit); active != "active" || now != inv {
			t.Fatalf("after the rollback: unit %s invocation %s (was %s)", active, now, inv)
		}
		time.Sleep(time.Until(started.Add(90 * time.Second)))
		openGate(t, gate)
		var end mcpwire.JobStatus
		for !end.Done {
			var w mcpwire.JobWaitResult
			if code, msg := jobCall(t, url, alice, mcpwire.ToolJobWait, map[string]any{"id": st.Job.ID, "waitMs": 20000}, &w); code != "" {
				t.Fatalf("job.wait through the tunnel: %s %s", code, msg)
			}
			end = w.Job
		}
		if end.State != mcpwire.JobExited || end.ExitCode == nil || *end.ExitCode != 7 || end.DurationMs < 90000 {
			t.Fatalf("end: %+v", end)
		}
		lines := strings.Split(strings.TrimSuffix(string(s.allOutput(alice, st.Job.ID, "stdout")), "\n"), "\n")
		if len(lines) < 3 || lines[len(lines)-1] != "finished" {
			t.Fatalf("output %q", lines)
		}
		for i, l := range lines[:len(lines)-1] {
			if l != fmt.Sprintf("tick %d", i) {
				t.Fatalf("line %d is %q: output not complete", i, l)
			}
		}
	})

	t.Run("ends while no backend runs", func(t *testing.T) {
		s.T = t
		gate := filepath.Join(s.Dir, "gate-stopped")
		var st mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": gated(gate)}, &st)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		prod, _, _ := s.Prod()
		if err := s.M.Client.Stop(cctx, prod); err != nil {
			t.Fatal(err)
		}
		openGate(t, gate)
		proctest.Eventually(t, "the job's unit gone", func() bool {
			gone, err := s.M.Client.Gone(ctx, st.Job.Unit)
			return err == nil && gone
		})
		if err := s.M.Client.Start(cctx, prod); err != nil {
			t.Fatal(err)
		}
		var end mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, &end)
		if end.State != mcpwire.JobExited || end.ExitCode == nil || *end.ExitCode != 7 {
			t.Fatalf("after the backend came back: %+v", end)
		}
	})

	t.Run("output cap and ownership", func(t *testing.T) {
		s.T = t
		var st mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "yes", "waitMs": 20000}, &st)
		end := st.Job
		if !end.Done {
			end = s.waitJob(alice, st.Job.ID)
		}
		if end.State != mcpwire.JobOutputLimit || end.StdoutBytes != 100000 {
			t.Fatalf("output cap: %+v", end)
		}
		if code, _ := jobCall(t, s.Backend, "bob", mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, nil); code != string(mcpwire.CodeNotFound) {
			t.Fatalf("bob sees alice's job: %q", code)
		}
		var l mcpwire.JobList
		s.job("bob", mcpwire.ToolJobList, map[string]any{}, &l)
		if l.Total != 0 {
			t.Fatalf("bob lists %+v", l)
		}
	})

	t.Run("start cost", func(t *testing.T) {
		s.T = t
		const n = 20
		var took time.Duration
		for range n {
			var st mcpwire.JobStartResult
			t0 := time.Now()
			s.job("bench", mcpwire.ToolJobStart, map[string]any{"command": "true"}, &st)
			took += time.Since(t0)
			// Not the caps' business here: one at a time.
			if !st.Job.Done {
				s.waitJob("bench", st.Job.ID)
			}
		}
		t.Logf("figures: job.start over HTTP in systemd mode: %.1f ms each (mean of %d, transient unit started and running when it returns)", float64(took.Microseconds())/1000/n, n)
	})

	// The job looks for the jobs' directories (the state directory's
	// path is no secret) to write exit.json saying it exited 0 long ago:
	// its shell runs where the state directory is an empty read-only
	// directory (the sandbox's mask, or job-shell's without one; its
	// supervisor's /proc entry, which names --dir, is masked too), so it
	// finds nothing and cannot write; it runs until job.cancel stops it,
	// and the record is the supervisor's.
	t.Run("the job's shell does not see the state directory", func(t *testing.T) {
		s.T = t
		const planted = `{"version":1,"state":"exited","exitCode":0,"started":"2020-01-01T00:00:00Z","ended":"2020-01-01T00:00:01Z"}`
		state := filepath.Join(s.Dir, "jobstate")
		cmd := `st=` + state + `; for d in "$st"/v1/*/; do [ -d "$d" ] || continue; ` +
			`if printf '%s' '` + planted + `' > "$d/exit.json"; then echo planted; else echo refused; fi; done; ` +
			`echo "entries $(ls -A "$st" | wc -l)"; exec sleep 600`
		var st mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": cmd}, &st)
		var out string
		proctest.Eventually(t, "the job tried", func() bool {
			out = string(s.allOutput(alice, st.Job.ID, "stdout"))
			return strings.Contains(out, "entries")
		})
		if strings.Contains(out, "planted") || !strings.Contains(out, "entries 0") {
			t.Fatalf("the job's shell saw or wrote the state directory: %q", out)
		}
		if _, err := os.Stat(filepath.Join(s.Dir, "jobstate", "v1", st.Job.ID, "exit.json")); !os.IsNotExist(err) {
			t.Fatalf("exit.json while the job runs (%v)", err)
		}
		var js mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, &js)
		if js.Done || js.State != mcpwire.JobRunning {
			t.Fatalf("status: %+v", js)
		}
		s.job(alice, mcpwire.ToolJobCancel, map[string]any{"id": st.Job.ID}, &js)
		if js.State != mcpwire.JobCancelled {
			t.Fatalf("cancel: %+v", js)
		}
		rec, err := os.ReadFile(filepath.Join(s.Dir, "jobstate", "v1", st.Job.ID, "exit.json"))
		if err != nil || !strings.Contains(string(rec), `"cancelled"`) {
			t.Fatalf("record on disk %s (%v), want the supervisor's", rec, err)
		}
	})

	t.Run("supervisor killed: lost; reboot: never running", func(t *testing.T) {
		s.T = t
		var st mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "sleep 600"}, &st)
		u, err := s.M.Client.Unit(ctx, st.Job.Unit)
		if err != nil {
			t.Fatal(err)
		}
		s.inContainer("kill", "-9", strconv.Itoa(int(u.MainPID)))
		proctest.Eventually(t, "the killed job lost", func() bool {
			var js mcpwire.JobStatus
			s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, &js)
			return js.State == mcpwire.JobLost
		})
		var r mcpwire.JobStartResult
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "sleep 600"}, &r)
		s.M.Reboot(t)
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for _, u := range []string{units.SlotUnit(s.Cfg.Backend.Unit, units.BootSlot)} {
			if err := s.M.Client.Start(cctx, u); err != nil {
				t.Fatal(err)
			}
		}
		s.WaitHTTP(s.Backend+"/readyz", 20*time.Second)
		var after mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": r.Job.ID}, &after)
		if !after.Done || (after.State != mcpwire.JobLost && after.State != mcpwire.JobKilled) {
			t.Fatalf("after the reboot: %+v", after)
		}
		t.Logf("after the reboot: %s (%s)", after.State, after.Message)
	})
}

// TestJobContainment: where the kernel delegates the memory and pids
// controllers to the container's systemd (cgroup v2, as on a stock Debian
// 12 host), a job allocating beyond its MemoryMax is killed in its own
// cgroup while the backend goes on as it was (same MainPID, no restart,
// /healthz 200, the memory guard not shedding), and a fork bomb stops at
// the job's own TasksMax. On a hybrid v1 hierarchy without them the
// limits are set but not enforced: this is the one test that skips there,
// under CI=true too, saying why.
func TestJobContainment(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := jobSite(t)
	ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	inside := s.inContainer("sh", "-c", "cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null || true")
	if err != nil || !strings.Contains(inside, "memory") || !strings.Contains(inside, "pids") {
		t.Skipf("containment not testable here: the container's systemd has no delegated memory and pids controllers (cgroup v2 controllers inside: %q; host: %q, %v): limits are set on the job's unit but the kernel does not enforce them", strings.TrimSpace(inside), strings.TrimSpace(string(ctrl)), err)
	}
	const alice = "alice"
	prod, _, _ := s.Prod()
	before, err := s.M.Client.Unit(context.Background(), prod)
	if err != nil {
		t.Fatal(err)
	}
	var hog mcpwire.JobStartResult
	// tail keeps its input's last line in memory: 1 GiB without a newline.
	s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "head -c 1G /dev/zero | tail >/dev/null", "memoryMaxBytes": 64 << 20, "waitMs": 30000}, &hog)
	end := hog.Job
	if !end.Done {
		end = s.waitJob(alice, hog.Job.ID)
	}
	if end.State == mcpwire.JobExited && (end.ExitCode == nil || *end.ExitCode == 0) {
		t.Fatalf("the memory hog was not killed: %+v", end)
	}
	after, err := s.M.Client.Unit(context.Background(), prod)
	if err != nil {
		t.Fatal(err)
	}
	if after.MainPID != before.MainPID || after.NRestarts != before.NRestarts || after.ActiveState != "active" {
		t.Fatalf("the backend changed: MainPID %d->%d NRestarts %d->%d %s", before.MainPID, after.MainPID, before.NRestarts, after.NRestarts, after.ActiveState)
	}
	s.WaitHTTP(s.Backend+"/healthz", 5*time.Second)
	var m struct {
		Memory struct {
			Shedding bool `json:"shedding"`
		} `json:"memory"`
	}
	resp, err := http.Get(s.Backend + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m.Memory.Shedding {
		t.Fatal("the memory guard sheds after a job's allocation")
	}
	var bomb mcpwire.JobStartResult
	s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "for i in $(seq 1 200); do sleep 30 & done; wait", "tasksMax": 32, "timeoutMs": 10000, "waitMs": 30000}, &bomb)
	if !bomb.Job.Done {
		bomb.Job = s.waitJob(alice, bomb.Job.ID)
	}
	if errs := string(s.allOutput(alice, bomb.Job.ID, "stderr")); !strings.Contains(errs, "Resource temporarily unavailable") {
		t.Fatalf("the fork bomb did not hit its tasks limit: %+v, stderr %.300q", bomb.Job, errs)
	}
}
