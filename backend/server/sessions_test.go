package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// wireClient speaks MCP over HTTP the way the TypeScript SDK does: it keeps
// the session id of the initialize answer, sends it on every request, and
// cancels with a notifications/cancelled POST of its own.
type wireClient struct {
	url     string
	session string
}

func (c *wireClient) post(t testing.TB, msg map[string]any) (int, http.Header, []byte) {
	t.Helper()
	msg["jsonrpc"] = "2.0"
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, c.url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if c.session != "" {
		req.Header.Set(sessionHeader, c.session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %v: %v", msg["method"], err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (c *wireClient) initialize(t testing.TB) {
	t.Helper()
	code, h, body := c.post(t, map[string]any{"id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "wire", "version": "0"}}})
	if code != http.StatusOK || h.Get(sessionHeader) == "" {
		t.Fatalf("initialize: status %d, session %q: %.200s", code, h.Get(sessionHeader), body)
	}
	c.session = h.Get(sessionHeader)
	c.post(t, map[string]any{"method": "notifications/initialized"})
}

// start runs shell.exec with request id id: a command that records its
// pid in a file and sleeps. It returns the pid and a channel with the
// tool error code once the call answers ("" for success).
func (c *wireClient) start(t testing.TB, id int) (int, <-chan string) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	done := make(chan string, 1)
	go func() {
		_, _, body := c.post(t, map[string]any{"id": id, "method": "tools/call", "params": map[string]any{
			"name": "shell.exec", "arguments": map[string]any{"command": fmt.Sprintf("echo $$ > %s; exec sleep 30", pidFile)}}})
		var r toolReply
		if json.Unmarshal(body, &r) != nil {
			done <- "UNPARSABLE"
			return
		}
		done <- r.errorCode()
	}()
	return proctest.ReadPids(t, pidFile, 1)[0], done
}

func (c *wireClient) cancel(t testing.TB, id int) {
	t.Helper()
	if code, _, body := c.post(t, map[string]any{"method": "notifications/cancelled", "params": map[string]any{"requestId": id, "reason": "test"}}); code != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: status %d: %.200s", code, body)
	}
}

type sessionMetrics struct {
	Sessions SessionStats `json:"sessions"`
	Active   struct {
		Shell int64 `json:"shell"`
	} `json:"active"`
}

func (b *backend) sessionMetrics(t testing.TB) sessionMetrics {
	t.Helper()
	var m sessionMetrics
	if code := getJSON(t, b.url+"/metrics", &m); code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	return m
}

// A notifications/cancelled in its own POST kills the command it names, and
// only that one: two clients use the same request id.
func TestCancelNotificationOverHTTP(t *testing.T) {
	b := startBackend(t, nil)
	alice, bob := &wireClient{url: b.url}, &wireClient{url: b.url}
	alice.initialize(t)
	bob.initialize(t)
	if alice.session == bob.session {
		t.Fatalf("two clients got the same session id %q", alice.session)
	}
	alicePid, aliceDone := alice.start(t, 7)
	bobPid, bobDone := bob.start(t, 7)

	alice.cancel(t, 7)
	proctest.WaitDead(t, alicePid)
	if code := <-aliceDone; code != "CANCELLED" {
		t.Fatalf("cancelled call answered %q, want CANCELLED", code)
	}
	if !proctest.Alive(bobPid) {
		t.Fatalf("the other client's call with the same request id died")
	}
	// A cancel naming a finished call, or another session's id, reaches nothing.
	alice.cancel(t, 7)
	(&wireClient{url: b.url, session: "not-bobs-session"}).cancel(t, 7)
	if !proctest.Alive(bobPid) {
		t.Fatalf("a cancel from another session killed the call")
	}
	m := b.sessionMetrics(t)
	if m.Active.Shell != 1 || m.Sessions.CancelDelivered != 1 || m.Sessions.InFlight != 1 || m.Sessions.Issued != 2 {
		t.Fatalf("metrics after one delivered cancel: %+v", m)
	}
	bob.cancel(t, 7)
	proctest.WaitDead(t, bobPid)
	if code := <-bobDone; code != "CANCELLED" {
		t.Fatalf("bob's call answered %q", code)
	}
	proctest.Eventually(t, "shell slots released", func() bool { return b.sessionMetrics(t).Active.Shell == 0 })
}

// A restarted backend has never seen the client's session id: it serves the
// client as it is, and the id still scopes its cancels.
func TestUnknownSessionIDAccepted(t *testing.T) {
	b := startBackend(t, nil)
	c := &wireClient{url: b.url, session: "issued-by-the-previous-process"}
	code, _, body := c.post(t, map[string]any{"id": 1, "method": "tools/call", "params": map[string]any{"name": "system.info", "arguments": map[string]any{}}})
	if code != http.StatusOK || parseReply(t, body).errorCode() != "" {
		t.Fatalf("call with an unknown session id: status %d: %.300s", code, body)
	}
	pid, done := c.start(t, 2)
	c.cancel(t, 2)
	proctest.WaitDead(t, pid)
	if code := <-done; code != "CANCELLED" {
		t.Fatalf("answered %q", code)
	}
}

// A cancel that overtakes its call (separate connections race) still
// cancels it when it arrives, and the early cancels are bounded.
func TestEarlyCancel(t *testing.T) {
	b := startBackend(t, nil)
	c := &wireClient{url: b.url, session: "s"}
	c.cancel(t, 3)
	code, _, body := c.post(t, map[string]any{"id": 3, "method": "tools/call", "params": map[string]any{
		"name": "shell.exec", "arguments": map[string]any{"command": "sleep 30"}}})
	if got := parseReply(t, body).errorCode(); code != http.StatusOK || got != "CANCELLED" {
		t.Fatalf("call after its cancel: status %d code %q", code, got)
	}
	for i := range maxEarlyCancels + 10 {
		c.cancel(t, 1000+i)
	}
	st := b.sessionMetrics(t).Sessions
	if st.EarlyCancels != maxEarlyCancels || st.EarlyDropped != 10 {
		t.Fatalf("early cancels %d (cap %d), dropped %d", st.EarlyCancels, maxEarlyCancels, st.EarlyDropped)
	}
}

// Tracking a call for cancellation is no way around admission: with the
// shell slot and the queue taken, a session's call is refused like any.
func TestSessionNoAdmissionBypass(t *testing.T) {
	b := startBackend(t, func(c *config.Config) { c.Concurrency.MaxShell = 1; c.Concurrency.MaxQueue = 0 })
	g := newGate(t)
	held := b.holdShell(t, g)
	c := &wireClient{url: b.url}
	c.initialize(t)
	_, _, body := c.post(t, map[string]any{"id": 1, "method": "tools/call", "params": map[string]any{
		"name": "shell.exec", "arguments": map[string]any{"command": "true"}}})
	if got := parseReply(t, body).errorCode(); got != "OVERLOADED" {
		t.Fatalf("call over the limit with a session: %q", got)
	}
	g.open(t)
	<-held
}

// TestEarlyCancelsAreBounded: a cancel that names no call in flight is held
// for its call only within bounds that a client cannot push: a request id
// longer than any message id is not held at all (1 MiB ids leave the heap
// as it was), held cancels expire on time rather than only when the table
// is full, and the gauge counts live ones only.
func TestEarlyCancelsAreBounded(t *testing.T) {
	b := startBackend(t, nil)
	c := &wireClient{url: b.url}
	c.initialize(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	huge := strings.Repeat("9", 1<<20)
	for range 64 {
		c.post(t, map[string]any{"method": "notifications/cancelled", "params": map[string]any{"requestId": json.RawMessage(`"` + huge + `"`)}})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := b.sessionMetrics(t).Sessions
	if st.EarlyCancels != 0 || st.CancelNotices != 64 {
		t.Fatalf("huge ids held: %+v", st)
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 16<<20 {
		t.Fatalf("heap grew by %d bytes after 64 cancels with 1 MiB ids", grown)
	}
	// Expiry on time: a fake clock past the TTL empties the table without
	// it ever filling up.
	clock := time.Now()
	b.srv.cancels.mu.Lock()
	b.srv.cancels.now = func() time.Time { return clock }
	b.srv.cancels.mu.Unlock()
	for i := range 10 {
		c.cancel(t, 5000+i)
	}
	if st := b.sessionMetrics(t).Sessions; st.EarlyCancels != 10 {
		t.Fatalf("early cancels %d, want 10", st.EarlyCancels)
	}
	b.srv.cancels.mu.Lock()
	clock = clock.Add(earlyCancelTTL + time.Second)
	b.srv.cancels.mu.Unlock()
	if st := b.sessionMetrics(t).Sessions; st.EarlyCancels != 0 || st.EarlyDropped < 10 {
		t.Fatalf("expired cancels still counted: %+v", st)
	}
}

// TestEarlyCancelFloodEvictsItsOwn: a principal flooding cancels fills the
// table with its own entries and, once it is full, evicts its own oldest,
// never another principal's held cancel (real OAuth token vs the operator).
func TestEarlyCancelFloodEvictsItsOwn(t *testing.T) {
	env := startOAuthEnv(t)
	tok := env.clientToken(t, env.as.Issuer, env.resources[0], "mcp:read mcp:exec")
	send := func(token, session string, id int) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)
		req, _ := http.NewRequest(http.MethodPost, env.direct+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(sessionHeader, session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send(env.operator, "operator-session", 7)
	for i := range maxEarlyCancels + 100 {
		send(tok, "flood-session", 100000+i)
	}
	sc := env.srv.cancels
	sc.mu.Lock()
	_, kept := sc.early[callKey{"operator-session", "7"}]
	n := len(sc.early)
	sc.mu.Unlock()
	if !kept || n > maxEarlyCancels {
		t.Fatalf("operator's held cancel kept %v, table %d (cap %d)", kept, n, maxEarlyCancels)
	}
}
