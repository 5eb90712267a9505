package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// fullSite is a site whose jobs' state and approvals live on a tmpfs of
// 4 MiB mounted inside the container (never the host's disk), which fill
// fills and free empties.
type fullSite struct {
	*site
	fs, jobs, approvals string
}

func newFullSite(t *testing.T) *fullSite {
	s := newSite(t, 60*time.Second)
	fs := filepath.Join(s.Dir, "full")
	f := &fullSite{site: s, fs: fs, jobs: filepath.Join(fs, "jobs"), approvals: filepath.Join(fs, "approvals")}
	s.inContainer("mkdir", "-p", fs)
	s.inContainer("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "mcp-e2e-full", fs)
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen,
		"jobs": map[string]any{"stateDir": f.jobs, "outputBytes": 100000, "totalOutputBytes": 1 << 20},
		"policy": map[string]any{
			"default":   "allow",
			"rules":     []map[string]any{{"id": "ask-touch", "action": "ask", "reason": "touch changes files", "commands": []string{"touch *"}}},
			"approvals": map[string]any{"dir": f.approvals},
		}})
	s.restartBackend()
	return f
}

// fill writes zeros to the tmpfs until it is full and checks that no byte
// is left.
func (f *fullSite) fill() {
	f.T.Helper()
	f.inContainer("sh", "-c", "dd if=/dev/zero of="+filepath.Join(f.fs, "fill")+" bs=4k oflag=append conv=notrunc 2>/dev/null; true")
	if avail := strings.Fields(f.inContainer("df", "--output=avail", "-B1", f.fs)); len(avail) != 2 || avail[1] != "0" {
		f.T.Fatalf("the tmpfs is not full: df says %q", avail)
	}
}

func (f *fullSite) free() {
	f.T.Helper()
	f.inContainer("rm", "-f", filepath.Join(f.fs, "fill"))
}

func exitOf(js mcpwire.JobStatus) string {
	if js.ExitCode == nil {
		return "null"
	}
	return fmt.Sprint(*js.ExitCode)
}

// TestFullDisk is a full filesystem under the jobs' state and the
// approvals, through the real backend in a real systemd (jobs as
// transient units): a job that ends while it is full keeps its result
// (its command's exit 7, during the outage and once space is back, never
// lost), and every call the full disk refuses (a job.start, a call that
// needs an approval) is UNAVAILABLE, retryable, naming the directory and
// the free space it needs; once space is back both work again.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := newFullSite(t)
	const alice = "alice"
	gate := filepath.Join(s.Dir, "gate")
	var st mcpwire.JobStartResult
	// The policy would ask about gated's computed "[": test(1) instead.
	s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "until test -e " + gate + "; do sleep 0.1; done; echo finished; exit 7"}, &st)
	s.fill()
	openGate(t, gate)
	end := s.waitJob(alice, st.Job.ID)
	t.Logf("ended on the full disk: %s exit %s (%s)", end.State, exitOf(end), end.Message)
	s.fill() // what the job's reserve left over once its record was written

	for _, c := range []struct {
		name, tool string
		args       map[string]any
		dir        string
	}{
		{"job.start", mcpwire.ToolJobStart, map[string]any{"command": "true"}, jobsDir(s.jobs)},
		{"an approval", mcpwire.ToolShellExec, map[string]any{"command": "touch " + filepath.Join(s.Dir, "touched")}, s.approvals},
	} {
		te := toolCall(t, s.Backend, alice, c.tool, c.args, nil)
		if te == nil || te.Code != mcpwire.CodeUnavailable || !te.Retryable || te.RetryAfterMs <= 0 ||
			!strings.Contains(te.Message, "no space left") || !strings.Contains(te.Message, c.dir) || !strings.Contains(te.Message, "needs at least") {
			t.Errorf("%s on the full disk: %+v, want UNAVAILABLE, retryable, naming %s and the space it needs", c.name, te, c.dir)
		} else {
			t.Logf("%s on the full disk: %s", c.name, te.Message)
		}
	}

	s.free()
	var after mcpwire.JobStatus
	s.job(alice, mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}, &after)
	for _, c := range []struct {
		name string
		js   mcpwire.JobStatus
	}{{"during the outage", end}, {"after space is back", after}} {
		if c.js.State != mcpwire.JobExited || exitOf(c.js) != "7" {
			t.Errorf("%s: job %s exit %s (%s), want exited 7", c.name, c.js.State, exitOf(c.js), c.js.Message)
		}
	}
	var again mcpwire.JobStartResult
	s.job(alice, mcpwire.ToolJobStart, map[string]any{"command": "true"}, &again)
	if te := toolCall(t, s.Backend, alice, mcpwire.ToolShellExec, map[string]any{"command": "touch " + filepath.Join(s.Dir, "touched")}, nil); te == nil || te.Code != mcpwire.CodeNeedsApproval {
		t.Errorf("an approval once space is back: %+v, want NEEDS_APPROVAL", te)
	}
}

// jobsDir is the directory a job's files go to under the jobs' state directory.
func jobsDir(jobs string) string { return filepath.Join(jobs, "v1") }
