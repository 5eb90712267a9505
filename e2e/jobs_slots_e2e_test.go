package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/state"
)

// TestJobsAcrossSlots: under a real systemd, jobs started on one slot of
// production are the other slot's too: a job started before a cutover is
// read, deduplicated by its idempotency key, waited for and cancelled
// after it; and jobs started on the new slot while the old one is parked
// (the cutover not yet confirmed: mcpctl died there) are read,
// deduplicated, waited for and cancelled by the old slot once `mcpctl
// rollback --last` resumed it.
func TestJobsAcrossSlots(t *testing.T) {
	// The armed rollback's deadline leaves the test time to act while the
	// cutover is pending.
	s := newSite(t, 150*time.Second)
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "jobs": map[string]any{
		"stateDir": filepath.Join(s.Dir, "jobstate"), "memoryMaxBytes": 1 << 30, "tasksMax": 256,
	}})
	s.restartBackend()
	v3 := s.Build("v3")
	s.Pass(s.Builds["v2"])
	s.Pass(v3)
	const alice = "alice"

	// pair is a job that ends when its gate opens (waited for) and one
	// that runs until cancelled, each started with its own key.
	type pair struct {
		gate         string
		wait, cancel mcpwire.JobStartResult
	}
	startPair := func(t *testing.T, name string) pair {
		p := pair{gate: filepath.Join(s.Dir, "gate-"+name)}
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": gated(p.gate), "idempotencyKey": name + "-wait"}, &p.wait)
		s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "sleep 600", "idempotencyKey": name + "-cancel"}, &p.cancel)
		if p.wait.Job.Mode != mcpwire.JobModeSystemd || p.cancel.Job.Unit == "" {
			t.Fatalf("jobs run in mode %q (unit %q), want systemd units", p.wait.Job.Mode, p.cancel.Job.Unit)
		}
		return p
	}
	// theOtherSlots checks p's jobs through the slot that serves now.
	theOtherSlots := func(t *testing.T, name string, p pair) {
		var st mcpwire.JobStatus
		if code, msg := jobCall(t, s.Backend, alice, mcpwire.ToolJobStatus, map[string]any{"id": p.wait.Job.ID}, &st); code != "" || st.State != mcpwire.JobRunning {
			t.Fatalf("job.status %s: %s %s state %q, want running", p.wait.Job.ID, code, msg, st.State)
		}
		var l mcpwire.JobList
		s.job(alice, mcpwire.ToolJobList, map[string]any{}, &l)
		listed := map[string]bool{}
		for _, j := range l.Jobs {
			listed[j.ID] = true
		}
		if !listed[p.wait.Job.ID] || !listed[p.cancel.Job.ID] {
			t.Fatalf("job.list (%d jobs) lacks %s or %s", len(l.Jobs), p.wait.Job.ID, p.cancel.Job.ID)
		}
		for _, j := range []struct {
			key string
			was mcpwire.JobStartResult
		}{{name + "-wait", p.wait}, {name + "-cancel", p.cancel}} {
			var again mcpwire.JobStartResult
			s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "sleep 600", "idempotencyKey": j.key}, &again)
			if !again.Reused || again.Job.ID != j.was.Job.ID {
				t.Fatalf("job.start with key %s: job %s reused %v, want job %s reused", j.key, again.Job.ID, again.Reused, j.was.Job.ID)
			}
		}
		openGate(t, p.gate)
		end := s.waitJob(alice, p.wait.Job.ID)
		if end.State != mcpwire.JobExited || end.ExitCode == nil || *end.ExitCode != 7 {
			t.Fatalf("job %s ended %s exit %v, want exited 7", p.wait.Job.ID, end.State, end.ExitCode)
		}
		if out := string(s.allOutput(alice, p.wait.Job.ID, "stdout")); !strings.HasSuffix(out, "finished\n") {
			t.Fatalf("job %s's stdout ends %q, want finished", p.wait.Job.ID, out[max(0, len(out)-40):])
		}
		var c mcpwire.JobStatus
		s.job(alice, mcpwire.ToolJobCancel, map[string]any{"id": p.cancel.Job.ID}, &c)
		if c = s.waitJob(alice, p.cancel.Job.ID); c.State != mcpwire.JobCancelled {
			t.Fatalf("job %s after job.cancel: %s, want cancelled", p.cancel.Job.ID, c.State)
		}
		if active, _ := s.Unit(p.cancel.Job.Unit); active == "active" {
			t.Fatalf("job %s's unit still active after job.cancel", p.cancel.Job.ID)
		}
	}

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a job started before a cutover is the new slot's", func(t *testing.T) {
			p := startPair(t, "before")
			code, out := s.Run("cutover", "--build", s.Builds["v2"], "--arm-rollback")
			if code != 0 || s.Version() != "v2" {
				t.Fatalf("cutover exit %d:\n%s", code, out)
			}
			if !strings.Contains(out, "jobs: 2 running before, 2 still running") {
				t.Fatalf("the cutover report does not name the running jobs:\n%s", out)
			}
			theOtherSlots(t, "before", p)
		}},
		{"jobs of the new slot are the parked slot's after rollback --last", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			paused := filepath.Join(s.Dir, "paused-parked")
			cmd := s.Command(ctx, "cutover", "--build", v3, "--arm-rollback")
			cmd.Env = append(cmd.Env, deploy.PauseEnv+"="+deploy.PauseParked+"="+paused)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(paused); err == nil {
					break
				}
				if time.Now().After(end) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("mcpctl never paused with the old slot parked:\n%s", out.String())
				}
			}
			// mcpctl dies there: v3 serves, v2's slot is parked, the
			// rollback armed.
			h := lockHolder(t, s)
			if _, err := s.M.Exec(ctx, "kill", "-KILL", fmt.Sprint(h.PID)); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if v := s.Version(); v != "v3" {
				t.Fatalf("production serves %s with the cutover pending, want v3", v)
			}
			p := startPair(t, "parked")
			code, rb := s.Run("--json", "rollback", "--last")
			var rep struct {
				Restarted bool
				Takeover  struct{ Resumed bool }
			}
			if err := json.Unmarshal([]byte(rb[strings.Index(rb, "{"):]), &rep); code != 0 || err != nil || s.Version() != "v2" {
				t.Fatalf("rollback --last exit %d (%v), serving %s:\n%s", code, err, s.Version(), rb)
			}
			if rep.Restarted || !rep.Takeover.Resumed {
				t.Fatalf("rollback --last restarted %v, resumed %v: want the parked slot resumed, nothing started:\n%s", rep.Restarted, rep.Takeover.Resumed, rb)
			}
			theOtherSlots(t, "parked", p)
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, func(t *testing.T) { s.T = t; st.run(t) }) {
			t.FailNow()
		}
	}
}

// lockHolder is the process holding mcpctl's lock on the site.
func lockHolder(t testing.TB, s *site) state.Holder {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Cfg.StateDir, state.LockFile))
	var h state.Holder
	if err != nil || json.Unmarshal(b, &h) != nil || h.PID == 0 {
		t.Fatalf("no holder of mcpctl's lock (%v): %q", err, b)
	}
	return h
}
