package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestJobsAcrossAHandoff runs two real backends on one passed socket and
// one jobs state directory, as production's two slots do during a
// cutover: a job started on the old process is found, listed, waited for,
// deduplicated by its idempotency key and cancelled through the new one
// after the handoff, the running-jobs cap counts the old process's jobs,
// and after the way back (a rollback: the parked process takes over
// again) the jobs the new process started are the old one's as well.
func TestJobsAcrossAHandoff(t *testing.T) {
	ln, sock := passedSocket(t)
	addr := ln.Addr().String()
	base := "http://" + addr
	// Three running jobs, the last kept for a principal that holds none:
	// one principal runs two.
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q,"jobs":{"mode":"process","stateDir":%q,"maxRunning":3,"maxRunningPerPrincipal":3,"maxRunningPerConversation":3}}`, addr, t.TempDir()))
	oldStatus := slotStatus(t)
	old, oldErr := activated(t, sock, "serve", "--config", cfg)
	standby := proctest.FreeAddr(t)
	t.Setenv(StandbyEnv, standby)
	nextStatus := slotStatus(t)
	next, nextErr := activated(t, sock, "serve", "--config", cfg)
	alive := func(b *backend, stderr fmt.Stringer) {
		select {
		case <-b.done:
			t.Fatalf("a backend exited: %v\n%s", b.err, stderr)
		default:
		}
	}
	proctest.Eventually(t, "the standby serves its own listener", func() bool { alive(next, nextErr); return readyAt("http://" + standby) })
	proctest.Eventually(t, "old serves on the shared socket", func() bool { alive(old, oldErr); return readyAt(base) })
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	callAt := func(t testing.TB, base, tool string, args map[string]any, out any) mcpclient.Result {
		t.Helper()
		r := callIn(hc, base, "conversation-1", tool, args)
		if r.OK() && out != nil {
			if err := json.Unmarshal(r.Structured, out); err != nil {
				t.Fatalf("%s: %v", tool, err)
			}
		}
		return r
	}
	call := func(t testing.TB, tool string, args map[string]any, out any) mcpclient.Result {
		t.Helper()
		return callAt(t, base, tool, args, out)
	}
	must := func(t testing.TB, tool string, args map[string]any, out any) {
		t.Helper()
		if r := call(t, tool, args, out); !r.OK() {
			t.Fatalf("%s %v: %s %s %s\nold:\n%s\nnew:\n%s", tool, args, r.Kind, r.Code, r.Detail, oldErr, nextErr)
		}
	}
	start := func(t testing.TB, command, key string) mcpwire.JobStartResult {
		t.Helper()
		var st mcpwire.JobStartResult
		args := map[string]any{"command": command}
		if key != "" {
			args["idempotencyKey"] = key
		}
		must(t, mcpwire.ToolJobStart, args, &st)
		return st
	}
	// ended waits for job id to end and returns its status.
	ended := func(t testing.TB, id string) mcpwire.JobWaitResult {
		t.Helper()
		var w mcpwire.JobWaitResult
		for w.WaitEnded != "done" {
			must(t, mcpwire.ToolJobWait, map[string]any{"id": id, "waitMs": 20000}, &w)
			if w.WaitEnded == "shutdown" {
				t.Fatalf("job.wait %s: the serving backend shuts down", id)
			}
		}
		return w
	}
	cancelled := func(t testing.TB, id string) {
		t.Helper()
		var st mcpwire.JobStatus
		must(t, mcpwire.ToolJobCancel, map[string]any{"id": id}, &st)
		if w := ended(t, id); w.Job.State != mcpwire.JobCancelled {
			t.Fatalf("job %s after job.cancel: %s, want %s", id, w.Job.State, mcpwire.JobCancelled)
		}
	}
	listed := func(t testing.TB, ids ...string) {
		t.Helper()
		var l mcpwire.JobList
		must(t, mcpwire.ToolJobList, map[string]any{}, &l)
		have := map[string]bool{}
		for _, j := range l.Jobs {
			have[j.ID] = true
		}
		for _, id := range ids {
			if !have[id] {
				t.Errorf("job.list lacks job %s (lists %d jobs)", id, len(l.Jobs))
			}
		}
	}
	handoff := func(t testing.TB, to, from *backend, fromStatus func() string) {
		t.Helper()
		to.cmd.Process.Signal(syscall.SIGUSR1)
		from.cmd.Process.Signal(syscall.SIGUSR2)
		proctest.Eventually(t, "the old slot parks", func() bool { return fromStatus() == mcpwire.SlotParked })
	}

	var short, long, onNew, other mcpwire.JobStartResult
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"one key started on both processes at once starts one job", func(t *testing.T) {
			// The standby serves the tools on its own listener: half the
			// starts reach it, half the old process.
			const n = 8
			res := make(chan mcpwire.JobStartResult, n)
			fails := make(chan string, n)
			for i := range n {
				at := base
				if i%2 == 1 {
					at = "http://" + standby
				}
				go func() {
					var st mcpwire.JobStartResult
					r := callIn(hc, at, "conversation-1", mcpwire.ToolJobStart, map[string]any{"command": "sleep 120", "idempotencyKey": "both"})
					if !r.OK() {
						fails <- fmt.Sprintf("%s %s %s", r.Kind, r.Code, r.Detail)
						return
					}
					if err := json.Unmarshal(r.Structured, &st); err != nil {
						fails <- err.Error()
						return
					}
					res <- st
				}()
			}
			ids := map[string]int{}
			fresh := 0
			for range n {
				select {
				case f := <-fails:
					t.Fatalf("job.start: %s", f)
				case st := <-res:
					ids[st.Job.ID]++
					if !st.Reused {
						fresh++
					}
				}
			}
			if len(ids) != 1 || fresh != 1 {
				t.Fatalf("%d starts with one key on two processes: jobs %v, %d not reused; want one job, started once", n, ids, fresh)
			}
			for id := range ids {
				cancelled(t, id)
			}
		}},
		{"jobs start on the old process", func(t *testing.T) {
			short = start(t, "sleep 2; echo finished", "short")
			long = start(t, "sleep 120", "long")
		}},
		{"handoff to the new process", func(t *testing.T) { handoff(t, next, old, oldStatus) }},
		{"job.status finds the old process's job", func(t *testing.T) {
			var st mcpwire.JobStatus
			must(t, mcpwire.ToolJobStatus, map[string]any{"id": long.Job.ID}, &st)
			if st.State != mcpwire.JobRunning {
				t.Fatalf("job %s: %s, want running", long.Job.ID, st.State)
			}
		}},
		{"job.list lists them", func(t *testing.T) { listed(t, short.Job.ID, long.Job.ID) }},
		{"the same idempotency key returns the same job", func(t *testing.T) {
			again := start(t, "sleep 120", "long")
			if !again.Reused || again.Job.ID != long.Job.ID {
				t.Fatalf("job.start with key long: job %s reused %v, want job %s reused", again.Job.ID, again.Reused, long.Job.ID)
			}
		}},
		{"job.wait sees the old process's job end", func(t *testing.T) {
			w := ended(t, short.Job.ID)
			if w.Job.State != mcpwire.JobExited || w.Job.ExitCode == nil || *w.Job.ExitCode != 0 || !strings.Contains(w.Stdout.Data, "finished") {
				t.Fatalf("job %s ended %s (exit %v), stdout %q; want exited 0 with its output", short.Job.ID, w.Job.State, w.Job.ExitCode, w.Stdout.Data)
			}
		}},
		{"the cap counts the old process's running job", func(t *testing.T) {
			onNew = start(t, "sleep 120", "on-new")
			r := call(t, mcpwire.ToolJobStart, map[string]any{"command": "sleep 120"}, nil)
			if r.Code != string(mcpwire.CodeOverloaded) {
				t.Fatalf("a third job of one principal: %s %s %s, want %s (the cap keeps the last place)", r.Kind, r.Code, r.Detail, mcpwire.CodeOverloaded)
			}
		}},
		{"job.cancel ends the old process's job", func(t *testing.T) { cancelled(t, long.Job.ID) }},
		{"rollback: the parked old process takes over again", func(t *testing.T) { handoff(t, old, next, nextStatus) }},
		{"the new process's job is found, listed and deduplicated", func(t *testing.T) {
			var st mcpwire.JobStatus
			must(t, mcpwire.ToolJobStatus, map[string]any{"id": onNew.Job.ID}, &st)
			if st.State != mcpwire.JobRunning {
				t.Fatalf("job %s: %s, want running", onNew.Job.ID, st.State)
			}
			listed(t, short.Job.ID, long.Job.ID, onNew.Job.ID)
			again := start(t, "sleep 120", "on-new")
			if !again.Reused || again.Job.ID != onNew.Job.ID {
				t.Fatalf("job.start with key on-new: job %s reused %v, want job %s reused", again.Job.ID, again.Reused, onNew.Job.ID)
			}
		}},
		{"a freed place is taken once, wherever it freed", func(t *testing.T) {
			other = start(t, "sleep 120", "")
			if r := call(t, mcpwire.ToolJobStart, map[string]any{"command": "sleep 120"}, nil); r.Code != string(mcpwire.CodeOverloaded) {
				t.Fatalf("a third job of one principal: %s %s, want %s", r.Kind, r.Code, mcpwire.CodeOverloaded)
			}
		}},
		{"job.cancel ends the new process's job", func(t *testing.T) {
			cancelled(t, onNew.Job.ID)
			cancelled(t, other.Job.ID)
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Logf("old:\n%s\nnew:\n%s", oldErr, nextErr)
			t.FailNow()
		}
	}
	stop(t, next, nextErr)
	stop(t, old, oldErr)
}
