package audit_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
)

// readLines decodes every JSON line of the file sink at path.
func readLines(t testing.TB, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestFileSinkKeepsFieldsAndRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.OpenFile(path, 4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	l := audit.New(audit.Options{Sink: sink, Identifier: "mcp-backend"})
	const n = 100
	for i := range n {
		r := audit.Record{Event: audit.EventCallStart, Message: "tool call start"}
		r.Add(audit.FieldCallID, strconv.Itoa(i))
		r.Add(audit.FieldCommand, "echo \"quoted\"\nnext line")
		r.Add(audit.FieldPath, "") // empty: left out
		l.Emit(r)
	}
	if err := l.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	var all []map[string]string
	for _, p := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("rotated file %s: %v", p, err)
		}
		if st.Size() > 4096 {
			t.Errorf("%s is %d bytes, over maxBytes 4096", p, st.Size())
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %o, want 0600", p, st.Mode().Perm())
		}
		all = append(all, readLines(t, p)...)
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3 exists: keep is 2", path)
	}
	if len(all) == 0 || len(all) >= n {
		t.Fatalf("%d records in the kept files, want some (the oldest rotated away)", len(all))
	}
	last := -1
	for _, m := range all {
		id, _ := strconv.Atoi(m[audit.FieldCallID])
		if id != last+1 && last != -1 {
			t.Fatalf("call ids jump from %d to %d: records lost inside the kept files", last, id)
		}
		last = id
		if m[audit.FieldMessageID] != audit.MsgCallStart || m[audit.FieldEvent] != audit.EventCallStart || m[audit.FieldIdentifier] != "mcp-backend" {
			t.Fatalf("record without its id, event or identifier: %v", m)
		}
		if _, err := time.Parse(time.RFC3339Nano, m[audit.FieldTime]); err != nil {
			t.Fatalf("TIME %q: %v", m[audit.FieldTime], err)
		}
		if m[audit.FieldCommand] != "echo \"quoted\"\nnext line" {
			t.Fatalf("command %q did not survive the round trip", m[audit.FieldCommand])
		}
		if _, ok := m[audit.FieldPath]; ok {
			t.Fatal("an empty field was written")
		}
	}
	if last != n-1 {
		t.Fatalf("last call id %d, want %d", last, n-1)
	}
}

// blockingSink stands in for a journal that stopped reading (a fault the
// journal cannot be made to show outside a container): Write blocks until
// released, then fails while failing is set.
type blockingSink struct {
	release chan struct{}
	mu      sync.Mutex
	failing bool
	got     []audit.Record
}

func (s *blockingSink) Write(r audit.Record) error {
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("journal unreachable")
	}
	s.got = append(s.got, r)
	return nil
}
func (s *blockingSink) Close() error { return nil }

func TestLogNeverBlocksAndSaysWhatItLost(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	l := audit.New(audit.Options{Sink: sink, Buffer: 8})
	// The writer takes one record and blocks in the sink; 8 fill the
	// buffer; the rest are dropped at once.
	const n = 50
	done := make(chan struct{})
	go func() {
		for range n {
			l.Emit(audit.Record{Event: audit.EventCallEnd})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Emit blocked on a sink that does not take records")
	}
	for l.Pending() > 8 {
		time.Sleep(time.Millisecond)
	}
	dropped := l.Dropped()
	if dropped < n-9 || dropped > n-8 {
		t.Fatalf("dropped %d of %d with a buffer of 8 and one in the sink, want %d or %d", dropped, n, n-9, n-8)
	}
	// The journal comes back failing: those writes are lost too.
	sink.mu.Lock()
	sink.failing = true
	sink.mu.Unlock()
	close(sink.release)
	for deadline := time.Now().Add(30 * time.Second); l.Dropped() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	sink.mu.Lock()
	sink.failing = false
	sink.mu.Unlock()
	if l.Dropped() != n {
		t.Fatalf("dropped %d, want all %d (buffer full or sink failing)", l.Dropped(), n)
	}
	if !l.Failing() {
		t.Fatal("Failing() = false after the sink refused the last record")
	}
	l.EmitWritten(audit.Record{Event: audit.EventCallStart}, 30*time.Second)
	if l.Failing() {
		t.Fatal("Failing() = true after a record was written again")
	}
	if err := l.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 1 {
		t.Fatalf("%d records written, want the one after the outage", len(sink.got))
	}
	if got := sink.got[0].Get(audit.FieldLost); got != strconv.Itoa(n) {
		t.Fatalf("%s = %q on the first record that succeeded, want %d", audit.FieldLost, got, n)
	}
}

// TestRefusalsOfAnOutageReachTheTrailAfterIt: refusals counted while the
// sink loses records are held, not emitted into the loss, and reach the
// sink with their exact count once it takes records again (before, their
// record went to the full buffer and was lost with the rest).
func TestRefusalsOfAnOutageReachTheTrailAfterIt(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	l := audit.New(audit.Options{Sink: sink, Buffer: 2, Window: 10 * time.Millisecond})
	l.Emit(audit.Record{Event: audit.EventCallEnd})
	for l.Pending() > 0 { // the writer holds it, blocked in the sink
		time.Sleep(time.Millisecond)
	}
	for range 3 { // two fill the buffer, one is lost: failing
		l.Emit(audit.Record{Event: audit.EventCallEnd})
	}
	if !l.Failing() {
		t.Fatal("not failing with the buffer full")
	}
	r := audit.Refusal{Status: 200, Outcome: "UNAVAILABLE", Scope: "server", Reason: "audit", Tool: "shell.exec"}
	for range 7 {
		l.Refused(r)
	}
	time.Sleep(100 * time.Millisecond) // ten windows end while failing
	close(sink.release)
	l.EmitWritten(audit.Record{Event: audit.EventCallStart}, 30*time.Second) // taken: no longer failing
	deadline := time.Now().Add(30 * time.Second)
	for {
		sink.mu.Lock()
		var count string
		for _, rec := range sink.got {
			if rec.Event == audit.EventRefused {
				count = rec.Get(audit.FieldCount)
			}
		}
		sink.mu.Unlock()
		if count == "7" {
			break
		}
		if count != "" || time.Now().After(deadline) {
			t.Fatalf("refusal record count %q, want the 7 of the outage", count)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := l.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRefusalsAggregateWithExactCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.OpenFile(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := audit.New(audit.Options{Sink: sink, Window: 50 * time.Millisecond})
	flows := []audit.Refusal{
		{Status: 401, Outcome: "invalid_token", Scope: "auth", Reason: "wrong token", Host: "mcp.example.com"},
		{Status: 200, Outcome: "OVERLOADED", Scope: "queue-full", Tool: "shell.exec", PrincipalKind: "operator", Principal: "operator", Conversation: "c1"},
		{Status: 200, Outcome: "OVERLOADED", Scope: "queue-full", Tool: "shell.exec", PrincipalKind: "oauth", Principal: "iss alice", Conversation: "c2"},
	}
	want := []int{3000, 2000, 1000}
	var wg sync.WaitGroup
	for i, f := range flows {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range want[i] / 4 {
					l.Refused(f)
				}
			}()
		}
	}
	wg.Wait()
	if err := l.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	records := 0
	for _, m := range readLines(t, path) {
		if m[audit.FieldMessageID] != audit.MsgRefused {
			t.Fatalf("not a refusal record: %v", m)
		}
		records++
		n, _ := strconv.Atoi(m[audit.FieldCount])
		got[m[audit.FieldPrincipal]+"/"+m[audit.FieldOutcome]] += n
	}
	for i, f := range flows {
		if k := f.Principal + "/" + f.Outcome; got[k] != want[i] {
			t.Errorf("flow %s: counted %d, want %d", k, got[k], want[i])
		}
	}
	if records > 3*200 {
		t.Errorf("%d records for 6000 refusals: not aggregated", records)
	}
}

// shapeOf is the shape the backend's descriptor of tool gives, as the
// server passes it.
func shapeOf(tool string) *audit.Shape {
	if d, ok := tooldesc.Lookup(tool); ok {
		return new(audit.Shape(d.Audit))
	}
	return nil
}

func TestArgumentsKeepSecretsOut(t *testing.T) {
	long := strings.Repeat("x", 5000)
	cases := []struct {
		name, tool, args string
		want             map[string]string
		never            []string
	}{
		{"file.write content is size and sha256", "file.write", `{"path":"/etc/x","content":"s3cr3t-body","mode":"0600"}`,
			map[string]string{audit.FieldPath: "/etc/x", audit.FieldContentBytes: "11", audit.FieldContentSHA256: sha("s3cr3t-body"), audit.FieldArgs: `{"mode":"0600"}`},
			[]string{"s3cr3t-body"}},
		{"file.write base64 hashes the decoded bytes", "file.write", `{"path":"/x","content":"aGVsbG8=","encoding":"base64"}`,
			map[string]string{audit.FieldContentBytes: "5", audit.FieldContentSHA256: sha("hello")}, []string{"aGVsbG8="}},
		{"shell.exec env names, not values; command cut", "shell.exec", `{"command":"` + long + `","env":{"TOKEN":"hunter2","A":"b"},"cwd":"/srv","timeoutMs":5}`,
			map[string]string{audit.FieldEnvNames: "A TOKEN", audit.FieldCommandBytes: "5000", audit.FieldCommand: long[:audit.CommandBytes], audit.FieldPath: "/srv", audit.FieldArgs: `{"timeoutMs":5}`},
			[]string{"hunter2"}},
		{"process.kill target", "process.kill", `{"pid":1234,"signal":"KILL"}`,
			map[string]string{audit.FieldTargetPID: "1234", audit.FieldKillSignal: "KILL"}, nil},
		{"service.control", "service.control", `{"unit":"a.service","action":"restart"}`,
			map[string]string{audit.FieldUnit: "a.service", audit.FieldAction: "restart"}, nil},
		{"unknown tool: names only", "x.y", `{"password":"pw-value"}`,
			map[string]string{audit.FieldArgs: `{"names":["password"]}`}, []string{"pw-value"}},
		{"not an object", "file.read", `[1]`, map[string]string{audit.FieldArgs: `"(not a JSON object)"`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]string{}
			var all strings.Builder
			for _, f := range audit.Arguments(shapeOf(c.tool), json.RawMessage(c.args)) {
				got[f.Name] = f.Value
				all.WriteString(f.Value)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			for _, s := range c.never {
				if strings.Contains(all.String(), s) {
					t.Errorf("secret %q recorded: %v", s, got)
				}
			}
		})
	}
}

func TestTargetOf(t *testing.T) {
	tg, ok := audit.TargetOf(strconv.Itoa(os.Getpid()))
	if !ok || tg.Comm == "" || tg.Start == "" {
		t.Fatalf("TargetOf(self) = %+v, %v", tg, ok)
	}
	if _, ok := audit.TargetOf("0"); ok {
		t.Fatal("pid 0 has a target")
	}
	if _, ok := audit.TargetOf("../self"); ok {
		t.Fatal("a path was read as a pid")
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
