package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// jobsBackend is a backend with jobs in process mode (whatever runs the
// tests) and small limits.
func jobsBackend(t testing.TB, mutate func(*config.Config)) *backend {
	return startBackend(t, func(c *config.Config) {
		c.Jobs.Mode = config.JobsProcess
		c.Jobs.StateDir = t.TempDir()
		if mutate != nil {
			mutate(c)
		}
	})
}

// callAs posts a tools/call with _meta openai/subject set to subject (the
// principal of an unauthenticated client) and openai/session to conv.
func jobCallAs(t testing.TB, b *backend, subject, conv, tool string, args any) toolReply {
	t.Helper()
	params := map[string]any{"name": tool, "arguments": args}
	if subject != "" || conv != "" {
		params["_meta"] = map[string]any{"openai/subject": subject, "openai/session": conv}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call", "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, resp, err := post(ctx, b.url+"/mcp", body)
	if err != nil || st != 200 {
		t.Fatalf("%s: status %d err %v: %.300s", tool, st, err, resp)
	}
	return parseReply(t, resp)
}

// okAs is callAs for a call that must succeed, decoded into Out.
func okAs[Out any](t testing.TB, b *backend, subject, tool string, args any) Out {
	t.Helper()
	r := jobCallAs(t, b, subject, "c1", tool, args)
	if code := r.errorCode(); code != "" {
		t.Fatalf("%s: %s: %s", tool, code, r.Result.Content[0].Text)
	}
	var out Out
	if err := json.Unmarshal(r.Result.StructuredContent, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func failsAs(t testing.TB, b *backend, subject, tool string, args any, want mcpwire.Code) string {
	t.Helper()
	r := jobCallAs(t, b, subject, "c1", tool, args)
	if code := r.errorCode(); code != string(want) {
		t.Fatalf("%s: outcome %q, want %s", tool, code, want)
	}
	return r.Result.Content[0].Text
}

func chunkBytes(t testing.TB, c mcpwire.JobChunk) []byte {
	t.Helper()
	if c.Encoding == mcpwire.EncodingBase64 {
		b, err := base64.StdEncoding.DecodeString(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []byte(c.Data)
}

// TestJobsOverHTTP drives the job tools through the real server in
// process mode: start, wait, exact bytes of both streams, status, output
// by offset, list, the idempotency key, and system.info's mode.
func TestJobsOverHTTP(t *testing.T) {
	b := jobsBackend(t, nil)
	const me = "alice"
	cmd := `printf 'a\377b\n'; printf 'caf\303\251\n' >&2; sleep 0.3; exit 3`
	st := okAs[mcpwire.JobStartResult](t, b, me, mcpwire.ToolJobStart, map[string]any{"command": cmd})
	if st.Job.ID == "" || st.Job.Mode != mcpwire.JobModeProcess || st.Reused {
		t.Fatalf("start: %+v", st)
	}
	id := st.Job.ID
	w := okAs[mcpwire.JobWaitResult](t, b, me, mcpwire.ToolJobWait, map[string]any{"id": id, "waitMs": 20000})
	if w.WaitEnded != "done" || w.Job.State != mcpwire.JobExited || w.Job.ExitCode == nil || *w.Job.ExitCode != 3 || !w.Job.Done {
		t.Fatalf("wait: %+v", w)
	}
	if got := chunkBytes(t, w.Stdout); !bytes.Equal(got, []byte("a\377b\n")) || w.Stdout.Encoding != mcpwire.EncodingBase64 || !w.Stdout.EOF {
		t.Fatalf("stdout %q (%+v)", got, w.Stdout)
	}
	if w.Stderr.Data != "café\n" || w.Stderr.Encoding != mcpwire.EncodingUTF8 || !w.Stderr.EOF {
		t.Fatalf("stderr %+v", w.Stderr)
	}
	// By offset: the 2-byte é split across chunks is carried whole.
	c1 := okAs[mcpwire.JobChunk](t, b, me, mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": "stderr", "offset": 1, "maxBytes": 3})
	if c1.Data != "af" || c1.NextOffset != 3 || c1.EOF {
		t.Fatalf("chunk 1 %+v", c1)
	}
	c2 := okAs[mcpwire.JobChunk](t, b, me, mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": "stderr", "offset": c1.NextOffset})
	if c2.Data != "é\n" || !c2.EOF || c2.NextOffset != c2.Total {
		t.Fatalf("chunk 2 %+v", c2)
	}
	failsAs(t, b, me, mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": "stdout", "offset": 99}, mcpwire.CodeInvalidArgument)
	s := okAs[mcpwire.JobStatus](t, b, me, mcpwire.ToolJobStatus, map[string]any{"id": id})
	if s.StdoutBytes != 4 || s.StderrBytes != 6 || s.EndedAt == nil || s.State != mcpwire.JobExited {
		t.Fatalf("status %+v", s)
	}
	l := okAs[mcpwire.JobList](t, b, me, mcpwire.ToolJobList, map[string]any{})
	if l.Total != 1 || l.Jobs[0].ID != id {
		t.Fatalf("list %+v", l)
	}
	// A retried start with the same key is the same job.
	args := map[string]any{"command": "echo once", "idempotencyKey": "k-1", "waitMs": 10000}
	a1 := okAs[mcpwire.JobStartResult](t, b, me, mcpwire.ToolJobStart, args)
	a2 := okAs[mcpwire.JobStartResult](t, b, me, mcpwire.ToolJobStart, args)
	if a1.Job.ID != a2.Job.ID || a1.Reused || !a2.Reused || a1.Stdout.Data != "once\n" || !a1.Job.Done {
		t.Fatalf("idempotent start: %+v / %+v", a1, a2)
	}
	// Another principal's key is its own.
	if b1 := okAs[mcpwire.JobStartResult](t, b, "bob", mcpwire.ToolJobStart, args); b1.Job.ID == a1.Job.ID {
		t.Fatal("bob got alice's job through her key")
	}
	type info struct {
		Backend struct {
			JobsMode string `json:"jobsMode"`
		} `json:"backend"`
	}
	if si := okAs[info](t, b, me, mcpwire.ToolSystemInfo, map[string]any{}); si.Backend.JobsMode != mcpwire.JobModeProcess {
		t.Fatalf("system.info jobsMode %q", si.Backend.JobsMode)
	}
	if m := b.metrics(t); m.Jobs == nil || m.Jobs.Started != 3 || m.Jobs.Kept != 3 || m.Jobs.OutputBytes == 0 {
		t.Fatalf("metrics jobs %+v", m.Jobs)
	}
}

// TestJobsOwnership: a job is invisible to another principal (NOT_FOUND,
// as for an id that does not exist), on every tool, and not in its list.
func TestJobsOwnership(t *testing.T) {
	b := jobsBackend(t, nil)
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": "sleep 30"})
	id := st.Job.ID
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{mcpwire.ToolJobStatus, map[string]any{"id": id}},
		{mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": "stdout"}},
		{mcpwire.ToolJobWait, map[string]any{"id": id, "waitMs": 0}},
		{mcpwire.ToolJobCancel, map[string]any{"id": id}},
		{mcpwire.ToolJobStatus, map[string]any{"id": "j0000000000000000"}},
		{mcpwire.ToolJobStatus, map[string]any{"id": "../../etc"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			failsAs(t, b, "bob", tc.tool, tc.args, mcpwire.CodeNotFound)
		})
	}
	if l := okAs[mcpwire.JobList](t, b, "bob", mcpwire.ToolJobList, map[string]any{}); l.Total != 0 {
		t.Fatalf("bob lists %+v", l)
	}
	// bob's cancel did nothing: alice's job still runs; hers ends it.
	if s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobStatus, map[string]any{"id": id}); s.Done {
		t.Fatalf("after bob's cancel: %+v", s)
	}
	if s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobCancel, map[string]any{"id": id}); s.State != mcpwire.JobCancelled {
		t.Fatalf("alice's cancel: %+v", s)
	}
}

// marked lists the pids whose environment holds marker.
func marked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, []byte(marker+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestJobsCancelKillsDescendantsAndCaps: cancel ends the whole group
// (background children included), the output cap ends a job with
// output_limit and keeps exactly the cap, the timeout ends it with
// timeout, and the caps on running jobs refuse with OVERLOADED.
func TestJobsCancelKillsDescendantsAndCaps(t *testing.T) {
	b := jobsBackend(t, func(c *config.Config) {
		c.Jobs.OutputBytes = 10000
		c.Jobs.MaxRunningPerConversation = 2
	})
	mark := fmt.Sprintf("JOBTEST_MARK=%d", time.Now().UnixNano())
	k, v, _ := strings.Cut(mark, "=")
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{
		"command": "sleep 300 & sleep 300 & wait", "env": map[string]string{k: v}})
	proctest.Eventually(t, "the job's three processes", func() bool { return len(marked(mark)) == 3 })
	// A second running job fills the conversation's share of 2; a third is refused.
	okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": "sleep 300"})
	msg := failsAs(t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": "true"}, mcpwire.CodeOverloaded)
	if !strings.Contains(msg, "maxRunningPerConversation") {
		t.Fatalf("refusal %q", msg)
	}
	// Another conversation of the same principal has its own share.
	if r := jobCallAs(t, b, "alice", "c2", mcpwire.ToolJobStart, map[string]any{"command": "true"}); r.errorCode() != "" {
		t.Fatalf("other conversation refused: %s", r.Result.Content[0].Text)
	}
	s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobCancel, map[string]any{"id": st.Job.ID})
	if s.State != mcpwire.JobCancelled || !s.Done {
		t.Fatalf("cancel: %+v", s)
	}
	if left := marked(mark); len(left) != 0 {
		t.Fatalf("processes left after cancel: %v", left)
	}
	out := okAs[mcpwire.JobStartResult](t, b, "bob", mcpwire.ToolJobStart, map[string]any{"command": "yes", "waitMs": 20000})
	if out.Job.State != mcpwire.JobOutputLimit || out.Job.StdoutBytes != 10000 {
		t.Fatalf("output cap: %+v", out.Job)
	}
	to := okAs[mcpwire.JobStartResult](t, b, "bob", mcpwire.ToolJobStart, map[string]any{"command": "sleep 30", "timeoutMs": 200, "waitMs": 20000})
	if to.Job.State != mcpwire.JobTimeout || to.Job.Signal == nil {
		t.Fatalf("timeout: %+v", to.Job)
	}
	failsAs(t, b, "bob", mcpwire.ToolJobStart, map[string]any{"command": "true", "timeoutMs": 1 << 40}, mcpwire.CodeInvalidArgument)
	failsAs(t, b, "bob", mcpwire.ToolJobStart, map[string]any{"command": "true", "memoryMaxBytes": 1 << 50}, mcpwire.CodeInvalidArgument)
}

// TestJobWaitHoldsNoSlot: more waits than there are slots wait at once
// while admission shows nothing active, other work still runs, and at the
// shutdown every wait is answered with the job's status (waitEnded
// shutdown), not UNAVAILABLE.
func TestJobWaitHoldsNoSlot(t *testing.T) {
	b := jobsBackend(t, func(c *config.Config) {
		c.Concurrency.MaxActive = 4
		c.Concurrency.ReservedControl = 1
		c.Concurrency.MaxShell = 1
	})
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": "sleep 60"})
	const waits = 10
	var wg sync.WaitGroup
	results := make([]toolReply, waits)
	for i := range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = jobCallAs(t, b, "alice", "c1", mcpwire.ToolJobWait, map[string]any{"id": st.Job.ID, "waitMs": 45000})
		}()
	}
	proctest.Eventually(t, "all waits waiting", func() bool { return b.srv.jobs.mgr.Waiters() == waits })
	if m := b.metrics(t); m.Active.Total != 0 {
		t.Fatalf("waits hold %d slots", m.Active.Total)
	}
	if r := jobCallAs(t, b, "alice", "c1", mcpwire.ToolShellExec, map[string]any{"command": "true"}); r.errorCode() != "" {
		t.Fatalf("shell.exec beside the waits: %s", r.errorCode())
	}
	b.srv.beginStopping()
	wg.Wait()
	for i, r := range results {
		var w mcpwire.JobWaitResult
		if r.errorCode() != "" || json.Unmarshal(r.Result.StructuredContent, &w) != nil || w.WaitEnded != "shutdown" || w.Job.State != mcpwire.JobRunning {
			t.Fatalf("wait %d at shutdown: %s %+v", i, r.errorCode(), w)
		}
	}
}

// BenchmarkJobStartHTTP is the cost of one job.start over HTTP through the
// real server in process mode (the command, true, ends at once).
func BenchmarkJobStartHTTP(b *testing.B) {
	bk := jobsBackend(b, func(c *config.Config) {
		c.Jobs.MaxRunning, c.Jobs.MaxRunningPerConversation, c.Jobs.MaxKept = 1024, 1024, 100000
	})
	b.ResetTimer()
	for b.Loop() {
		if r := jobCallAs(b, bk, "bench", "c1", mcpwire.ToolJobStart, map[string]any{"command": "true"}); r.errorCode() != "" {
			b.Fatal(r.errorCode())
		}
	}
}

// TestJobsModeAuto: auto picks systemd only under a unit with a state
// directory; the canary (a unit without one) serves no jobs, and says so
// through the tools; outside systemd, process.
func TestJobsModeAuto(t *testing.T) {
	tests := []struct {
		name, invocation, stateDir, mode, want string
	}{
		{"outside systemd", "", "", config.JobsAuto, config.JobsProcess},
		{"the canary", "0123", "", config.JobsAuto, config.JobsOff},
		{"production", "0123", "/var/lib/mcp-backend", config.JobsAuto, config.JobsSystemd},
		{"asked for", "0123", "", config.JobsProcess, config.JobsProcess},
		{"off", "", "", config.JobsOff, config.JobsOff},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("INVOCATION_ID", tc.invocation)
			t.Setenv("STATE_DIRECTORY", tc.stateDir)
			if got, _ := jobsMode(tc.mode); got != tc.want {
				t.Fatalf("jobsMode(%s) = %s, want %s", tc.mode, got, tc.want)
			}
		})
	}
	t.Run("the canary over HTTP", func(t *testing.T) {
		t.Setenv("INVOCATION_ID", "0123")
		t.Setenv("STATE_DIRECTORY", "")
		b := startBackend(t, nil)
		msg := failsAs(t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": "true"}, mcpwire.CodeUnavailable)
		if !strings.Contains(msg, "canary") {
			t.Fatalf("refusal %q does not say why", msg)
		}
		if m := b.metrics(t); m.Jobs == nil || m.Jobs.Mode != mcpwire.JobModeOff {
			t.Fatalf("metrics jobs %+v", m.Jobs)
		}
	})
}
