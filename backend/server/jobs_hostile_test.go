package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/fleet"
)

// TestJobStateOutOfReachOfFileTools: the jobs' state directory in use,
// the private temporary one of process mode included, and every job's
// files (its environment, its output, its record) are refused to the file
// tools by every path trick, for another principal and for the job's own:
// no file tool reads a job's environment or output or writes its record.
func TestJobStateOutOfReachOfFileTools(t *testing.T) {
	b := startBackend(t, func(c *config.Config) { c.Jobs.Mode = config.JobsProcess }) // stateDir "": a temporary directory
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{
		"command": "echo job-output-marker; sleep 300", "env": map[string]string{"JOB_SECRET": "job-env-marker"}})
	jobDir := b.srv.jobs.mgr.Dir(st.Job.ID)
	stateDir := filepath.Dir(filepath.Dir(jobDir)) // <dir>/v1/<id>
	if !strings.HasPrefix(stateDir, os.TempDir()) {
		t.Fatalf("state directory %s is not process mode's temporary one", stateDir)
	}
	proctest.Eventually(t, "the job's output", func() bool {
		b, _ := os.ReadFile(filepath.Join(jobDir, "stdout"))
		return strings.Contains(string(b), "job-output-marker")
	})
	f := newSecretFixture(t)
	// A process whose working directory is the job's: /proc/PID/cwd.
	cwd := exec.Command("sleep", "300")
	cwd.Dir = jobDir
	if err := cwd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cwd.Process.Kill(); _ = cwd.Wait() })
	files := []struct {
		name, path, leak string
		isDir            bool
	}{
		{"state dir", stateDir, "", true},
		{"job dir", jobDir, "", true},
		{"env", filepath.Join(jobDir, "env"), "job-env-marker", false},
		{"stdout", filepath.Join(jobDir, "stdout"), "job-output-marker", false},
		{"spec", filepath.Join(jobDir, "spec.json"), "job-output-marker", false},
	}
	for _, fl := range files {
		paths := f.tricks(t, strings.ReplaceAll(fl.name, " ", "-"), fl.path, fl.isDir)
		rel := "."
		if !fl.isDir {
			rel = filepath.Base(fl.path)
		}
		if fl.path == jobDir || filepath.Dir(fl.path) == jobDir {
			paths["/proc/PID/cwd"] = "/proc/" + strconv.Itoa(cwd.Process.Pid) + "/cwd/" + rel
		}
		for trick, p := range paths {
			for _, who := range []string{"alice", "mallory"} {
				for _, tool := range []string{mcpwire.ToolFileRead, mcpwire.ToolFileList, mcpwire.ToolFileWrite} {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", fl.name, trick, who, tool), func(t *testing.T) {
						args := map[string]any{"path": p}
						if tool == mcpwire.ToolFileWrite {
							args = map[string]any{"path": p, "content": "{}", "createParents": true}
							if fl.isDir {
								args["path"] = p + "/exit.json"
							}
						}
						r := jobCallAs(t, b, who, "c1", tool, args)
						if r.errorCode() != string(mcpwire.CodePermissionDenied) {
							t.Fatalf("answer %+v, want PERMISSION_DENIED", r.Result)
						}
						if e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey]); !strings.Contains(e.Message, "jobs.stateDir") {
							t.Fatalf("refusal %q does not name jobs.stateDir", e.Message)
						}
						if fl.leak != "" && strings.Contains(fmt.Sprint(r.Result), fl.leak) {
							t.Fatalf("the refusal carries the job's data: %+v", r.Result)
						}
					})
				}
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(jobDir, "exit.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused write left exit.json (%v)", err)
	}
	if s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobStatus, map[string]any{"id": st.Job.ID}); s.Done {
		t.Fatalf("job ended: %+v", s)
	}
}

// plantedRecord is an exit.json saying "exited 0" long ago: taken as the
// job's record, the job would look done, be pruned, and be uncancellable.
const plantedRecord = `{"version":1,"state":"exited","exitCode":0,"started":"2020-01-01T00:00:00Z","ended":"2020-01-01T00:00:01Z"}`

// TestJobWritingItsOwnRecordStillRuns: a job that writes exit.json into
// its own directory (without a sandbox it runs as the backend's user and
// sees the jobs' directory, so it can; every profile masks it) still runs
// for job.status, job.list and /metrics, is not pruned, is cancelled by
// job.cancel, and ends with the record its supervisor made.
func TestJobWritingItsOwnRecordStillRuns(t *testing.T) {
	b := jobsBackend(t, func(c *config.Config) { c.Jobs.KeepForMs = 1000; c.Sandbox.Allow = sandbox.None })
	hand := filepath.Join(t.TempDir(), "dir")
	cmd := fmt.Sprintf(`until [ -s %[1]s ]; do sleep 0.02; done; d=$(cat %[1]s); printf '%%s' '%[2]s' > "$d/exit.json" && echo planted; exec sleep 300`, hand, plantedRecord)
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{"command": cmd})
	id := st.Job.ID
	if err := os.WriteFile(hand, []byte(b.srv.jobs.mgr.Dir(id)), 0o600); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, "the job planted its record", func() bool {
		c := okAs[mcpwire.JobChunk](t, b, "alice", mcpwire.ToolJobOutput, map[string]any{"id": id, "stream": "stdout"})
		return strings.Contains(c.Data, "planted")
	})
	// Past the poll, the prune and KeepFor of the planted end.
	time.Sleep(1500 * time.Millisecond)
	if s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobStatus, map[string]any{"id": id}); s.Done || s.State != mcpwire.JobRunning {
		t.Fatalf("status after the job wrote its own record: %+v", s)
	}
	if l := okAs[mcpwire.JobList](t, b, "alice", mcpwire.ToolJobList, map[string]any{}); l.Total != 1 || l.Jobs[0].Done {
		t.Fatalf("list: %+v", l)
	}
	if m := b.metrics(t); m.Jobs.Running != 1 {
		t.Fatalf("metrics jobs.running %d, want 1", m.Jobs.Running)
	}
	s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobCancel, map[string]any{"id": id})
	if s.State != mcpwire.JobCancelled || !s.Done {
		t.Fatalf("cancel: %+v", s)
	}
	var rec struct{ State string }
	raw, err := os.ReadFile(filepath.Join(b.srv.jobs.mgr.Dir(id), "exit.json"))
	if err != nil || json.Unmarshal(raw, &rec) != nil || rec.State != mcpwire.JobCancelled {
		t.Fatalf("record on disk %s (%v), want the supervisor's cancelled", raw, err)
	}
}

// TestJobEscapeesEndWithTheJob: a job's child that leaves its process
// group (setsid) is killed with the job on job.cancel, on the job's
// timeout, and when the backend exits: real processes, found by a
// variable the job's environment carries.
func TestJobEscapeesEndWithTheJob(t *testing.T) {
	for _, end := range []string{"cancel", "timeout", "backend exit"} {
		t.Run(end, func(t *testing.T) {
			b := jobsBackend(t, nil)
			mark := fmt.Sprintf("ESCAPEE_MARK=%d", time.Now().UnixNano())
			k, v, _ := strings.Cut(mark, "=")
			args := map[string]any{"command": "setsid sleep 1000 & sleep 1000", "env": map[string]string{k: v}}
			if end == "timeout" {
				args["timeoutMs"] = 5000 // long enough to see its processes first
			}
			st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, args)
			proctest.Eventually(t, "the job's shell and both sleeps", func() bool { return len(marked(mark)) == 3 })
			switch end {
			case "cancel":
				if s := okAs[mcpwire.JobStatus](t, b, "alice", mcpwire.ToolJobCancel, map[string]any{"id": st.Job.ID}); s.State != mcpwire.JobCancelled {
					t.Fatalf("cancel: %+v", s)
				}
			case "timeout":
				w := okAs[mcpwire.JobWaitResult](t, b, "alice", mcpwire.ToolJobWait, map[string]any{"id": st.Job.ID, "waitMs": 30000})
				if w.Job.State != mcpwire.JobTimeout {
					t.Fatalf("wait: %+v", w.Job)
				}
			case "backend exit":
				b.srv.Close()
			}
			if left := marked(mark); len(left) != 0 {
				t.Fatalf("processes left after %s: %v", end, left)
			}
		})
	}
}

// TestJobOutputAlwaysProgresses: with maxBytes smaller than the character
// at offset, job.output still moves on (the whole character), so a client
// paging by nextOffset reads every byte and stops.
func TestJobOutputAlwaysProgresses(t *testing.T) {
	b := jobsBackend(t, nil)
	const text = "a€b😀c\xffd"
	st := okAs[mcpwire.JobStartResult](t, b, "alice", mcpwire.ToolJobStart, map[string]any{
		"command": `printf 'a\342\202\254b\360\237\230\200c\377d'`, "waitMs": 20000})
	if !st.Job.Done {
		t.Fatalf("job: %+v", st.Job)
	}
	for _, max := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("maxBytes %d", max), func(t *testing.T) {
			var got []byte
			off := int64(0)
			for calls := 0; ; calls++ {
				if calls > len(text) {
					t.Fatalf("no end after %d calls: read %q", calls, got)
				}
				c := okAs[mcpwire.JobChunk](t, b, "alice", mcpwire.ToolJobOutput, map[string]any{"id": st.Job.ID, "stream": "stdout", "offset": off, "maxBytes": max})
				if c.NextOffset <= off && !c.EOF {
					t.Fatalf("no progress at offset %d: %+v", off, c)
				}
				got = append(got, chunkBytes(t, c)...)
				off = c.NextOffset
				if c.EOF {
					break
				}
			}
			if string(got) != text {
				t.Fatalf("read %q, want %q", got, text)
			}
		})
	}
}

// TestFleetDirIsASecret: the fleet's directory on a host is refused to the
// file tools, so no caller can plant steps/<id>.json (which the fleet
// takes as "this step already ran") or a blob, by any path.
func TestFleetDirIsASecret(t *testing.T) {
	b := startBackend(t, nil)
	_, statErr := os.Lstat(mcpctlFleetDir)
	existed := statErr == nil
	t.Cleanup(func() {
		if !existed {
			_ = os.RemoveAll(mcpctlFleetDir) // only if a failing run made it
		}
	})
	links := t.TempDir()
	if err := os.Symlink(filepath.Dir(mcpctlFleetDir), filepath.Join(links, "varlib")); err != nil {
		t.Fatal(err)
	}
	step := filepath.Join(mcpctlFleetDir, "steps", "r1-web1-3-cutover.json")
	for name, p := range map[string]string{
		"direct":          step,
		"dotdot":          filepath.Dir(mcpctlFleetDir) + "/x/../" + filepath.Base(mcpctlFleetDir) + "/steps/a.json",
		"symlink parent":  filepath.Join(links, "varlib", filepath.Base(mcpctlFleetDir), "steps", "b.json"),
		"/proc/self/root": "/proc/self/root" + step,
		"blob":            filepath.Join(mcpctlFleetDir, "blobs", "sha256-"+strings.Repeat("ab", 32)),
	} {
		t.Run(name, func(t *testing.T) {
			r := jobCallAs(t, b, "mallory", "c1", mcpwire.ToolFileWrite, map[string]any{"path": p, "content": `{"exitCode":0}`, "createParents": true})
			if r.errorCode() != string(mcpwire.CodePermissionDenied) {
				t.Fatalf("answer %+v, want PERMISSION_DENIED", r.Result)
			}
			if e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey]); !strings.Contains(e.Message, "fleet directory") {
				t.Fatalf("refusal %q does not name the fleet directory", e.Message)
			}
		})
	}
	if !existed {
		if _, err := os.Lstat(mcpctlFleetDir); !os.IsNotExist(err) {
			t.Fatalf("%s exists after refused writes (%v)", mcpctlFleetDir, err)
		}
	}
}

// TestJobPlacesSharedPerPrincipal: one principal minting a conversation
// per job.start takes at most its share of the running jobs
// (jobs.maxRunningPerPrincipal); other principals still get places, one
// in a conversation of its own through the reserve kept for principals
// that hold none.
func TestJobPlacesSharedPerPrincipal(t *testing.T) {
	b := jobsBackend(t, func(c *config.Config) {
		c.Jobs.MaxRunning, c.Jobs.MaxRunningPerPrincipal, c.Jobs.MaxRunningPerConversation = 6, 3, 1
	})
	start := func(subject, conv string) string {
		return jobCallAs(t, b, subject, conv, mcpwire.ToolJobStart, map[string]any{"command": "sleep 300"}).errorCode()
	}
	got := 0
	for i := range 10 {
		switch code := start("mallory", fmt.Sprintf("minted-%d", i)); code {
		case "":
			got++
		case string(mcpwire.CodeOverloaded):
		default:
			t.Fatalf("start %d: %s", i, code)
		}
	}
	if got != 3 {
		t.Fatalf("a principal minting conversations got %d of 6 places, want its 3", got)
	}
	for _, f := range []struct{ subject, conv string }{{"bob", "b1"}, {"bob", "b2"}, {"carol", "c1"}} {
		if code := start(f.subject, f.conv); code != "" {
			t.Fatalf("%s in %s refused (%s) while mallory holds her share", f.subject, f.conv, code)
		}
	}
	if m := b.metrics(t); m.Jobs.Running != 6 {
		t.Fatalf("jobs.running %d, want 6", m.Jobs.Running)
	}
}

// TestJobWaitPlacesSharedPerPrincipal: one principal's job.wait calls,
// from as many conversations as it likes, leave a place for another
// principal's job.wait.
func TestJobWaitPlacesSharedPerPrincipal(t *testing.T) {
	b := jobsBackend(t, func(c *config.Config) { c.Jobs.MaxWaiters = 4 })
	mine := okAs[mcpwire.JobStartResult](t, b, "mallory", mcpwire.ToolJobStart, map[string]any{"command": "sleep 300"}).Job.ID
	theirs := okAs[mcpwire.JobStartResult](t, b, "bob", mcpwire.ToolJobStart, map[string]any{"command": "sleep 300"}).Job.ID
	const tries = 8
	codes := make(chan string, tries)
	for i := range tries {
		go func() {
			// Not jobCallAs: no t.Fatal off the test's goroutine.
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call", "params": map[string]any{
				"name": mcpwire.ToolJobWait, "arguments": map[string]any{"id": mine, "waitMs": 45000},
				"_meta": map[string]any{"openai/subject": "mallory", "openai/session": fmt.Sprintf("w%d", i)}}})
			st, resp, err := post(context.Background(), b.url+"/mcp", body)
			if err != nil || st != 200 {
				codes <- fmt.Sprintf("HTTP %d %v", st, err)
				return
			}
			codes <- parseReplyQuiet(resp)
		}()
	}
	// The refused ones answer at once; the rest wait.
	refused := 0
	proctest.Eventually(t, "mallory's waits placed or refused", func() bool {
		for {
			select {
			case c := <-codes:
				if c != string(mcpwire.CodeOverloaded) {
					t.Errorf("a wait ended with %q while the job runs", c)
				}
				refused++
				continue
			default:
			}
			return refused+b.srv.jobs.mgr.Waiters() == tries
		}
	})
	if held := tries - refused; held != 3 {
		t.Fatalf("mallory holds %d of 4 wait places, want 3 (one kept for others)", held)
	}
	var w mcpwire.JobWaitResult
	r := jobCallAs(t, b, "bob", "b1", mcpwire.ToolJobWait, map[string]any{"id": theirs, "waitMs": 100})
	if r.errorCode() != "" || json.Unmarshal(r.Result.StructuredContent, &w) != nil || w.WaitEnded != "timeout" {
		t.Fatalf("bob's wait beside mallory's: %s %+v", r.errorCode(), w)
	}
	okAs[mcpwire.JobStatus](t, b, "mallory", mcpwire.ToolJobCancel, map[string]any{"id": mine})
	for range tries - refused {
		if c := <-codes; c != "" {
			t.Fatalf("a placed wait ended with %q", c)
		}
	}
}

// TestFleetDirIsTheInventoryDefault: the directory refused is the one the
// fleet uses by default.
func TestFleetDirIsTheInventoryDefault(t *testing.T) {
	if d := fleet.Default().Defaults.FleetDir; d != mcpctlFleetDir {
		t.Fatalf("the fleet's default directory is %s, the file policy refuses %s", d, mcpctlFleetDir)
	}
}
