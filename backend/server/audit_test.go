package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/audit/audittest"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

const auditToken = "audit-test-token-0123456789abcdef"

const cancellingSession = "clients-that-give-up"

// auditBackend is a backend with the bearer token on and the file sink at
// the returned path.
func auditBackend(t testing.TB, mutate func(*config.Config)) (*backend, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(auditToken), 0o600); err != nil {
		t.Fatal(err)
	}
	bk := startBackend(t, func(c *config.Config) {
		c.Auth.BearerTokenFile = tok
		c.Audit.Sink, c.Audit.File = config.AuditFile, path
		if mutate != nil {
			mutate(c)
		}
	})
	return bk, path
}

// auditCall posts a tools/call with token (none when empty) and Host host,
// and returns the HTTP status and the tool error code ("" for success,
// "cancelled" when ctx ended first).
func auditCall(t testing.TB, ctx context.Context, url, host, token, tool string, args any) (int, string) {
	params := map[string]any{"name": tool, "arguments": args}
	if _, ok := ctx.Deadline(); ok {
		// Calls the client gives up on run in a conversation of their own:
		// the server may refuse one after the client left, which only the
		// audit trail sees.
		params["_meta"] = map[string]any{caller.MetaSession: cancellingSession}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call", "params": params})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", bytes.NewReader(body))
	req.Host = host
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "cancelled"
		}
		t.Errorf("%s: %v", tool, err)
		return 0, "transport"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && ctx.Err() != nil {
		return 0, "cancelled"
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, ""
	}
	return resp.StatusCode, parseReply(t, b).errorCode()
}

// auditRecords reads every record of the file sink.
func auditRecords(t testing.TB, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []map[string]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestAuditRecordsEveryCallOverHTTP: many concurrent calls of every tool
// and outcome through the real handler, with the file sink: one start and
// one end record per admitted call with the right fields, every refusal
// in an aggregate with its exact count, and no token, file.write body or
// environment value in the file.
func TestAuditRecordsEveryCallOverHTTP(t *testing.T) {
	bk, path := auditBackend(t, func(c *config.Config) {
		c.Concurrency.MaxActive, c.Concurrency.ReservedControl, c.Concurrency.MaxShell = 4, 1, 2
		c.Concurrency.MaxQueue, c.Concurrency.QueueWaitMs = 2, 300
		c.AllowedHosts = []string{"mcp.tunnel.example"}
	})
	dir := t.TempDir()
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	const host = "mcp.tunnel.example"
	const secretBody, secretEnv = "FILE-BODY-never-in-the-audit", "ENV-VALUE-never-in-the-audit"

	type job struct {
		tool, token string
		args        any
		timeout     time.Duration
	}
	var jobs []job
	for i := range 30 {
		jobs = append(jobs,
			job{tool: "system.info", token: auditToken, args: map[string]any{}},
			job{tool: "file.write", token: auditToken, args: map[string]any{"path": filepath.Join(dir, fmt.Sprintf("f%d", i)), "content": secretBody}},
			job{tool: "file.read", token: auditToken, args: map[string]any{"path": filepath.Join(dir, "absent")}},
			job{tool: "file.list", token: auditToken, args: map[string]any{"path": dir}},
			job{tool: "process.list", token: auditToken, args: map[string]any{"limit": 5}},
			job{tool: "shell.exec", token: auditToken, args: map[string]any{"command": "sleep 0.05; exit 3", "env": map[string]string{"SECRET_X": secretEnv}}},
			job{tool: "shell.exec", token: auditToken, args: map[string]any{"command": "sleep 5"}, timeout: 200 * time.Millisecond},
			job{tool: "system.info", token: "", args: map[string]any{}},
			job{tool: "system.info", token: "wrong-token-0123456789", args: map[string]any{}},
		)
	}

	var mu sync.Mutex
	got := map[string]int{} // outcome -> count, as the clients saw it
	var wg sync.WaitGroup
	work := make(chan job)
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if j.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, j.timeout)
				}
				status, code := auditCall(t, ctx, bk.url, host, j.token, j.tool, j.args)
				cancel()
				k := code
				switch {
				case status != 0 && status != http.StatusOK:
					k = strconv.Itoa(status)
				case code == "":
					k = "ok"
				}
				if j.timeout > 0 && k != "cancelled" {
					k = "giving-up:" + k
				}
				mu.Lock()
				got[k]++
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	// The kill after the storm, so it is admitted.
	if _, code := auditCall(t, context.Background(), bk.url, host, auditToken, "process.kill", map[string]any{"pid": victim.Process.Pid, "signal": "TERM"}); code != "" {
		t.Fatalf("process.kill: %s", code)
	}
	got["ok"]++
	jobs = append(jobs, job{tool: "process.kill"})
	if got["ok"] == 0 || got["OVERLOADED"] == 0 || got["cancelled"] == 0 || got["401"] != 60 {
		t.Fatalf("the mix did not produce every outcome: %v", got)
	}

	proctest.Eventually(t, "every admitted call ended and its record written", func() bool {
		m := bk.metrics(t)
		if !m.Idle() {
			return false
		}
		var s, e int
		for _, r := range auditRecords(t, path) {
			switch r[audit.FieldMessageID] {
			case audit.MsgCallStart:
				s++
			case audit.MsgCallEnd:
				e++
			}
		}
		return s == e
	})
	var metrics struct {
		Audit mcpwire.AuditMetrics `json:"audit"`
	}
	getJSON(t, bk.url+"/metrics", &metrics)
	if metrics.Audit.Sink != "file" || metrics.Audit.Dropped != 0 || metrics.Audit.Written == 0 {
		t.Errorf("/metrics audit = %+v, want the file sink, records written, none dropped", metrics.Audit)
	}
	if err := bk.srv.Audit().Close(5 * time.Second); err != nil { // flushes the refusal aggregates
		t.Fatal(err)
	}
	recs := auditRecords(t, path)
	starts, ends := audittest.CallPairs(t, recs)

	// The end records' outcomes are what the clients saw; a call the
	// client gave up on ended CANCELLED, or left the queue cancelled.
	outcomes := map[string]int{}
	for _, e := range ends {
		o := e[audit.FieldOutcome]
		if o == "" {
			t.Errorf("end record without an outcome: %v", e)
		}
		outcomes[o]++
	}
	giveUp := bk.srv.ids.Resolve(caller.Claims{MetaSession: cancellingSession}).Conversation
	refused, refusedGiveUp := map[string]int{}, map[string]int{}
	for _, r := range recs {
		if r[audit.FieldMessageID] != audit.MsgRefused {
			continue
		}
		n, err := strconv.Atoi(r[audit.FieldCount])
		if err != nil || n <= 0 {
			t.Errorf("refusal without a count: %v", r)
		}
		k := r[audit.FieldOutcome]
		if r[audit.FieldStatus] == "401" {
			k = "401"
		}
		if r[audit.FieldConversation] == giveUp {
			refusedGiveUp[k] += n
			continue
		}
		refused[k] += n
	}
	startsGiveUp := 0
	for _, st := range starts {
		if st[audit.FieldConversation] == giveUp {
			startsGiveUp++
		}
	}
	// Exact where the client saw the answer.
	if refused["401"] != got["401"] {
		t.Errorf("401 refusals in the aggregates: %d, the clients saw %d", refused["401"], got["401"])
	}
	if refused["OVERLOADED"] != got["OVERLOADED"] {
		t.Errorf("OVERLOADED refusals in the aggregates: %d, the clients saw %d", refused["OVERLOADED"], got["OVERLOADED"])
	}
	for _, k := range []string{"ok", "NOT_FOUND"} {
		if outcomes[k] != got[k] {
			t.Errorf("end records with outcome %s: %d, the clients saw %d (all: %v, clients: %v)", k, outcomes[k], got[k], outcomes, got)
		}
	}
	giving := 0
	for k, n := range got {
		if k == "cancelled" || strings.HasPrefix(k, "giving-up:") {
			giving += n
		}
	}
	total := len(jobs) - got["401"] - giving
	if n := len(starts) - startsGiveUp + refused["OVERLOADED"]; n != total {
		t.Errorf("%d starts + %d OVERLOADED = %d, want the %d authenticated calls that were answered", len(starts)-startsGiveUp, refused["OVERLOADED"], n, total)
	}
	// Where the client gave up, the server decided each call at most once,
	// and at least every refusal the client did see is there.
	if n := startsGiveUp + refusedGiveUp["OVERLOADED"] + refusedGiveUp["CANCELLED"]; n > giving || refusedGiveUp["OVERLOADED"] < got["giving-up:OVERLOADED"] {
		t.Errorf("calls given up on: %d starts + %v refusals, the clients sent %d and saw %d OVERLOADED", startsGiveUp, refusedGiveUp, giving, got["giving-up:OVERLOADED"])
	}

	sawKill, sawExit := false, false
	for id, s := range starts {
		for k, want := range map[string]string{audit.FieldPrincipalKind: "operator", audit.FieldPrincipal: "operator", audit.FieldHost: host, audit.FieldTransport: "http"} {
			if s[k] != want {
				t.Errorf("call %s start %s = %q, want %q", id, k, s[k], want)
			}
		}
		if s[audit.FieldQueuedMs] == "" || s[audit.FieldConversation] == "" {
			t.Errorf("call %s start without queued ms or conversation: %v", id, s)
		}
		switch s[audit.FieldTool] {
		case "process.kill":
			sawKill = true
			if s[audit.FieldTargetPID] != strconv.Itoa(victim.Process.Pid) || s[audit.FieldTargetComm] != "sleep" || s[audit.FieldTargetStart] == "" {
				t.Errorf("process.kill start without its target's identity: %v", s)
			}
		case "file.write":
			if s[audit.FieldContentBytes] != strconv.Itoa(len(secretBody)) || len(s[audit.FieldContentSHA256]) != 64 {
				t.Errorf("file.write start without size and sha256: %v", s)
			}
		case "shell.exec":
			if e := ends[id]; s[audit.FieldEnvNames] == "SECRET_X" && e[audit.FieldOutcome] == "ok" {
				sawExit = true
				if e[audit.FieldExitCode] != "3" || e[audit.FieldOutputBytes] == "" || e[audit.FieldTruncated] != "false" {
					t.Errorf("shell.exec end without exit code 3, output bytes, truncated: %v", e)
				}
			}
		}
	}
	if !sawKill || !sawExit {
		t.Errorf("process.kill start seen %v, shell.exec exit seen %v", sawKill, sawExit)
	}
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{auditToken, "wrong-token-0123456789", secretBody, secretEnv} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the audit file holds %q", secret)
		}
	}
}

// slowSink stands in for a journal that takes 1 ms per record, slower
// than the calls come: what a loaded or stopped journald looks like to
// the backend (a fault the real journal cannot be made to show here).
type slowSink struct{}

func (slowSink) Write(audit.Record) error { time.Sleep(time.Millisecond); return nil }
func (slowSink) Close() error             { return nil }

// BenchmarkToolCallAudit: system.info through the real handler with the
// audit trail off, on (the file sink: one write per record), and over a
// sink slower than the calls (records dropped and counted, calls not
// held up).
//
//	go test -run '^$' -bench ToolCallAudit -benchmem -count 3 ./backend/server/
func BenchmarkToolCallAudit(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`)
	b.Run("audit-off", func(b *testing.B) {
		bk := startBackend(b, func(c *config.Config) { c.Audit.Sink = config.AuditOff })
		benchPost(b, bk.srv.Handler(), body)
	})
	b.Run("audit-file", func(b *testing.B) {
		bk := startBackend(b, func(c *config.Config) {
			c.Audit.Sink, c.Audit.File = config.AuditFile, filepath.Join(b.TempDir(), "audit.jsonl")
		})
		benchPost(b, bk.srv.Handler(), body)
		b.ReportMetric(float64(bk.srv.Audit().Dropped()), "dropped")
	})
	b.Run("audit-slow-sink", func(b *testing.B) {
		bk := startBackend(b, func(c *config.Config) { c.Audit.Sink = config.AuditOff })
		bk.srv.audit.log = audit.New(audit.Options{Sink: slowSink{}, Buffer: 1024})
		bk.srv.audit.sink = "slow"
		benchPost(b, bk.srv.Handler(), body)
		b.ReportMetric(float64(bk.srv.Audit().Dropped()), "dropped")
	})
}

// TestAuditJobRecords: the calls of a job's life name it (job.start's end
// record, the other job tools' start and end records), and its end is a
// job.end record of its own with whose it was and how it ended.
func TestAuditJobRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	b := jobsBackend(t, func(c *config.Config) { c.Audit.Sink, c.Audit.File = config.AuditFile, path })
	r := jobCallAs(t, b, "alice", "conv-1", "job.start", map[string]any{"command": "echo hi; exit 5", "waitMs": 0})
	var started struct {
		Job mcpwire.JobStatus `json:"job"`
	}
	if err := json.Unmarshal(r.Result.StructuredContent, &started); err != nil || started.Job.ID == "" {
		t.Fatalf("job.start: %v %s", err, r.Result.StructuredContent)
	}
	st := started.Job
	jobCallAs(t, b, "alice", "conv-1", "job.wait", map[string]any{"id": st.ID, "waitMs": 20000})
	jobCallAs(t, b, "alice", "conv-1", "job.status", map[string]any{"id": st.ID})
	var recs []map[string]string
	// The job ended before job.wait answered, so its job.end record can be
	// in the file while job.status's end record still waits in the buffer:
	// wait for both.
	proctest.Eventually(t, "the job.end record and job.status's end record", func() bool {
		recs = auditRecords(t, path)
		jobEnd, statusEnd := false, false
		for _, r := range recs {
			switch r[audit.FieldMessageID] {
			case audit.MsgJobEnd:
				jobEnd = true
			case audit.MsgCallEnd:
				statusEnd = statusEnd || r[audit.FieldTool] == "job.status"
			}
		}
		return jobEnd && statusEnd
	})
	starts, ends := audittest.CallPairs(t, recs)
	named := map[string]int{} // tool/record -> records naming the job
	for id, e := range ends {
		if e[audit.FieldJobID] == st.ID {
			named[e[audit.FieldTool]+" end"]++
		}
		if starts[id][audit.FieldJobID] == st.ID {
			named[starts[id][audit.FieldTool]+" start"]++
		}
	}
	for _, want := range []string{"job.start end", "job.wait start", "job.wait end", "job.status start", "job.status end"} {
		if named[want] != 1 {
			t.Errorf("%s records naming the job: %d, want 1 (all: %v)", want, named[want], named)
		}
	}
	n := 0
	for _, r := range recs {
		if r[audit.FieldMessageID] != audit.MsgJobEnd {
			continue
		}
		n++
		if r[audit.FieldJobID] != st.ID || r[audit.FieldJobState] != mcpwire.JobExited || r[audit.FieldExitCode] != "5" ||
			r[audit.FieldPrincipalKind] != "asserted" || r[audit.FieldPrincipal] != "alice" || r[audit.FieldConversation] == "" || r[audit.FieldConversation] == "conv-1" {
			t.Errorf("job.end record %v", r)
		}
	}
	if n != 1 {
		t.Errorf("%d job.end records, want 1", n)
	}
}
