package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/memguard"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// served is a real Server run by Serve on a real listener, as in production.
type served struct {
	backend
	addr string
	stop context.CancelFunc
	done chan error
}

func serveBackend(t testing.TB, mutate func(*config.Config), limits func(*HTTPLimits)) *served {
	t.Helper()
	cfg := testConfig(t, mutate)
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv := newServer(t, cfg, log)
	if limits != nil {
		l := srv.HTTPLimits()
		limits(&l)
		srv.SetHTTPLimits(l)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{backend: backend{srv: srv, url: "http://" + ln.Addr().String()}, addr: ln.Addr().String(), stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

type intakeMetrics struct {
	Intake intakeJSON      `json:"intake"`
	Memory memguard.Sample `json:"memory"`
}

func (s *served) intake(t testing.TB) intakeMetrics {
	t.Helper()
	var m intakeMetrics
	if code := getJSON(t, s.url+"/metrics", &m); code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	return m
}

// stallBody opens a connection that sends the headers of a tools/call
// file.write with a body of size bytes and all of it but the last byte.
func stallBody(t testing.TB, addr string, id, size int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := fileWriteBody(id, size)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := c.Write(body[:len(body)-1]); err != nil {
		t.Fatal(err)
	}
	return c
}

// fileWriteBody is a tools/call file.write whose whole body is size bytes.
func fileWriteBody(id, size int) []byte {
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"file.write","arguments":{"path":"/nonexistent-dir/x","content":"`, id)
	tail := `"}}}`
	pad := size - len(head) - len(tail)
	return []byte(head + strings.Repeat("a", max(pad, 0)) + tail)
}

// readAnswer reads one HTTP response from a raw connection.
func readAnswer(t testing.TB, c net.Conn) (int, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer on the connection: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestBodyBudgetRefusesWithStructuredAnswers: connections stalled one byte
// short of large bodies fill the body budget; a complete large tools/call
// then gets an OVERLOADED tool result with its own id inside HTTP 200, a
// large non-tools/call a JSON-RPC error with 503, while small control calls
// (the reserve) and /healthz still work. Nothing more is held than the budget.
func TestBodyBudgetRefusesWithStructuredAnswers(t *testing.T) {
	const mib = 1 << 20
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.BodyBudget = 3 * mib })
	for i := range 3 {
		stallBody(t, s.addr, 100+i, mib)
	}
	proctest.Eventually(t, "three stalled bodies held", func() bool { return s.intake(t).Intake.BodyBytesHeld == 3*mib })

	status, body, err := post(context.Background(), s.url+"/mcp", fileWriteBody(4242, mib))
	if err != nil || status != 200 {
		t.Fatalf("large tools/call past the budget: HTTP %d %v %s", status, err, body)
	}
	var r struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(body, &r)
	if code := parseReply(t, body).errorCode(); code != "OVERLOADED" || string(r.ID) != "4242" {
		t.Fatalf("got %s id %s, want OVERLOADED for id 4242: %.300s", code, r.ID, body)
	}
	big := fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"x":"%s"}}}`, strings.Repeat("b", mib))
	status, body, _ = post(context.Background(), s.url+"/mcp", []byte(big))
	if rep := parseReply(t, body); status != http.StatusServiceUnavailable || rep.Error == nil {
		t.Fatalf("large tools/list past the budget: HTTP %d %s, want 503 and a JSON-RPC error", status, body)
	}
	status, body, _ = callRaw(context.Background(), s.url, "system.info", map[string]any{})
	if code := parseReply(t, body).errorCode(); status != 200 || code != "" {
		t.Fatalf("control call with the budget full: HTTP %d %s", status, code)
	}
	if code := getJSON(t, s.url+"/healthz", nil); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	m := s.intake(t).Intake
	if m.BodyBytesPeak > 3*mib+smallReserve || m.BodyRefused < 2 {
		t.Fatalf("intake %+v: held past the budget, or nothing refused", m)
	}
}

// TestStalledBodyIsCutOff: a client stalled mid-body is answered and
// disconnected at the body deadline, and its budget released.
func TestStalledBodyIsCutOff(t *testing.T) {
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.BodyIdleTimeout = 300 * time.Millisecond })
	c := stallBody(t, s.addr, 7, 1<<20)
	status, body := readAnswer(t, c)
	if rep := parseReply(t, body); status != http.StatusRequestTimeout || rep.Error == nil {
		t.Fatalf("stalled body: HTTP %d %s, want 408 and a JSON-RPC error", status, body)
	}
	proctest.Eventually(t, "budget released", func() bool {
		m := s.intake(t).Intake
		return m.BodyBytesHeld == 0 && m.BodyTimedOut == 1
	})
}

// TestConnectionCapKeepsProbesAndControl: with every normal connection
// busy with a call in flight, /healthz, /metrics and control calls are
// still answered (on reserve connections, which close after one answer),
// normal work there gets OVERLOADED, and no more than the cap is open.
// (Idle keep-alive connections cannot hold the cap: past half of it every
// answer closes its connection; see TestCrowdedListenerFreesPlaces.)
func TestConnectionCapKeepsProbesAndControl(t *testing.T) {
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.MaxConns, l.ReserveConns = 4, 2 })
	g := newGate(t)
	var held []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":%q},"_meta":{"openai/session":"held-%d"}}}`, i+1, g.command(), i)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		held = append(held, c)
		// Read the controller itself: a /metrics poll would take a
		// connection place of its own.
		proctest.Eventually(t, "call running", func() bool { return s.srv.Admission().Snapshot().Active.Shell == int64(i+1) })
	}
	if m := s.intake(t).Intake; m.ConnsOpen != 4 || m.ReserveConnsOpen != 1 {
		t.Fatalf("intake %+v, want 4 normal and this one reserve", m)
	}
	// Many concurrent probes and calls at the cap: each is answered.
	var wg sync.WaitGroup
	errs := make(chan string, 60)
	for i := range 20 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, s.url+"/healthz", nil)
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil || resp.StatusCode != 200 {
				errs <- fmt.Sprintf("healthz %d: %v", i, err)
				return
			}
			resp.Body.Close()
		}()
		go func() {
			defer wg.Done()
			status, body, err := callRaw(context.Background(), s.url, "system.info", map[string]any{})
			if err != nil || status != 200 || parseReply(t, body).errorCode() != "" {
				errs <- fmt.Sprintf("system.info %d: HTTP %d %v %.200s", i, status, err, body)
			}
		}()
		go func() {
			defer wg.Done()
			status, body, err := callRaw(context.Background(), s.url, "file.list", map[string]any{"path": "/"})
			if err != nil || status != 200 || parseReply(t, body).errorCode() != "OVERLOADED" {
				errs <- fmt.Sprintf("file.list %d: HTTP %d %v %.200s", i, status, err, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	g.open(t)
	for _, c := range held {
		if code, _ := readAnswer(t, c); code != 200 {
			t.Fatalf("held call answered %d", code)
		}
		c.Close()
	}
	proctest.Eventually(t, "the normal places free again", func() bool { return s.intake(t).Intake.ConnsOpen <= 1 })
	status, body, _ := callRaw(context.Background(), s.url, "file.list", map[string]any{"path": "/"})
	if status != 200 || parseReply(t, body).errorCode() != "" {
		t.Fatalf("file.list below the cap: HTTP %d %.200s", status, body)
	}
}

// TestIDsRoundTripOrAreRefused: an id comes back exactly as sent or the
// request is refused with -32600; every 400 on /mcp, ours or the SDK's, is
// a JSON-RPC error object.
func TestIDsRoundTripOrAreRefused(t *testing.T) {
	s := serveBackend(t, nil, nil)
	tests := []struct {
		name, id string
		status   int
	}{
		{"small integer", "7", 200},
		{"largest exact integer", "9007199254740991", 200},
		{"negative integer", "-9007199254740991", 200},
		{"string", `"abc-1"`, 200},
		{"250 digits", strings.Repeat("9", 250), 400},
		{"past 2^53", "9007199254740993", 400},
		{"fraction", "1.5", 400},
		{"exponent", "1e3", 400},
		{"object", `{"a":1}`, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":` + tc.id + `,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`
			status, b, err := post(context.Background(), s.url+"/mcp", []byte(body))
			if err != nil || status != tc.status {
				t.Fatalf("HTTP %d %v %.300s, want %d", status, err, b, tc.status)
			}
			var r struct {
				ID    json.RawMessage `json:"id"`
				Error *struct{ Code int }
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("not JSON: %.300s", b)
			}
			if tc.status == 200 && string(r.ID) != tc.id {
				t.Fatalf("id %s came back as %s", tc.id, r.ID)
			}
			if tc.status == 400 && (r.Error == nil || r.Error.Code != -32600) {
				t.Fatalf("want a -32600 error: %.300s", b)
			}
		})
	}
	ok := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	errorCases := []struct {
		name    string
		method  string
		headers map[string]string
		body    string
		status  int
	}{
		{"no Accept (SDK)", "POST", map[string]string{"Accept": ""}, ok, 400},
		{"unknown protocol version (SDK)", "POST", map[string]string{"MCP-Protocol-Version": "1999-01-01"}, ok, 400},
		{"wrong content type (SDK)", "POST", map[string]string{"Content-Type": "text/plain"}, ok, 415},
		{"GET (SDK)", "GET", nil, "", 405},
		{"not JSON", "POST", nil, "{", 400},
		{"batch", "POST", nil, "[" + ok + "]", 400},
		{"foreign Host", "POST", map[string]string{"Host": "evil.example"}, ok, 403},
	}
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.url+"/mcp", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.headers {
				if k == "Host" {
					req.Host = v
				} else if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var r struct {
				JSONRPC string
				Error   *struct {
					Code    int
					Message string
				}
			}
			if resp.StatusCode != tc.status || json.Unmarshal(b, &r) != nil || r.JSONRPC != "2.0" || r.Error == nil || r.Error.Message == "" ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("HTTP %d %q %q, want %d and a JSON-RPC error object", resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status)
			}
		})
	}
}

// TestMemoryGuardShedsNormalWork: a cgroup (files shaped like one) past the
// high-water mark makes /readyz 503 and normal calls OVERLOADED while
// control calls go on; below the low mark all recovers. /metrics shows it.
func TestMemoryGuardShedsNormalWork(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "mcp.service")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A real cgroup file is never seen half-written; os.WriteFile truncates
	// first, and a sample taken in between reads no anon line and drops
	// shedding. Write beside it and rename, as the kernel's view is atomic.
	write := func(name, body string) {
		t.Helper()
		tmp := filepath.Join(root, name+".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 1 << 30
	write("memory.current", "1\n")
	write("memory.high", strconv.Itoa(limit)+"\n")
	write("memory.max", "max\n")
	write("memory.stat", "anon 1000\n")
	pc := filepath.Join(root, "cgroup")
	if err := os.WriteFile(pc, []byte("0::/mcp.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := memguard.New(memguard.Options{Root: root, ProcCgroup: pc})
	if err != nil {
		t.Fatal(err)
	}
	s := serveBackend(t, nil, nil)
	s.srv.UseMemGuard(g, 10*time.Millisecond)

	call := func(tool string) string {
		args := map[string]any{}
		if tool == "file.list" {
			args["path"] = "/"
		}
		status, body, err := callRaw(context.Background(), s.url, tool, args)
		if err != nil || status != 200 {
			t.Fatalf("%s: HTTP %d %v", tool, status, err)
		}
		return parseReply(t, body).errorCode()
	}
	if c := call("file.list"); c != "" {
		t.Fatalf("file.list below the mark = %s", c)
	}
	write("memory.stat", fmt.Sprintf("anon %d\n", limit/100*90))
	proctest.Eventually(t, "shedding shown in /metrics and /readyz", func() bool {
		return s.intake(t).Memory.Shedding && getJSON(t, s.url+"/readyz", nil) == http.StatusServiceUnavailable
	})
	if c := call("file.list"); c != "OVERLOADED" {
		t.Fatalf("file.list while shedding = %q, want OVERLOADED", c)
	}
	if c := call("system.info"); c != "" {
		t.Fatalf("system.info while shedding = %q, want ok", c)
	}
	write("memory.stat", fmt.Sprintf("anon %d\n", limit/100*80)) // between the marks: still shedding
	proctest.Eventually(t, "sampled", func() bool { return s.intake(t).Memory.Anon == limit/100*80 })
	if c := call("file.list"); c != "OVERLOADED" {
		t.Fatalf("file.list between the marks = %q, want OVERLOADED", c)
	}
	write("memory.stat", fmt.Sprintf("anon %d\n", limit/100*50))
	proctest.Eventually(t, "recovered", func() bool {
		return !s.intake(t).Memory.Shedding && getJSON(t, s.url+"/readyz", nil) == 200
	})
	if c := call("file.list"); c != "" {
		t.Fatalf("file.list after recovery = %q", c)
	}
}

// TestShutdownAnswersEveryCall: at shutdown a call that finishes within
// the drain gets its result, a queued call gets UNAVAILABLE at once, and a
// call still running at the drain deadline gets UNAVAILABLE (retryable) on
// its own connection; its process group is dead once Serve returns.
func TestShutdownAnswersEveryCall(t *testing.T) {
	s := serveBackend(t, func(c *config.Config) { c.Concurrency.MaxShell = 2 }, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	short := newGate(t)
	type answer struct {
		code, text string
		err        error
	}
	run := func(cmd string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			status, body, err := callRaw(context.Background(), s.url, "shell.exec", map[string]any{"command": cmd})
			if err != nil || status != 200 {
				ch <- answer{err: fmt.Errorf("HTTP %d: %v", status, err)}
				return
			}
			r := parseReply(t, body)
			a := answer{code: r.errorCode()}
			if r.Result != nil && len(r.Result.Content) > 0 {
				a.text = r.Result.Content[0].Text
			}
			ch <- a
		}()
		return ch
	}
	long := run("echo $$ > " + pidFile + "; exec sleep 600")
	quick := run(short.command())
	proctest.Eventually(t, "two shells running", func() bool { return s.metrics(t).Active.Shell == 2 })
	queued := run("echo never")
	proctest.Eventually(t, "one queued", func() bool { return s.metrics(t).Queued.Total == 1 })
	pid := proctest.ReadPids(t, pidFile, 1)[0]

	s.stop()
	if a := <-queued; a.err != nil || a.code != "UNAVAILABLE" {
		t.Fatalf("queued call at shutdown: %+v, want UNAVAILABLE", a)
	}
	short.open(t) // finishes within the drain
	if a := <-quick; a.err != nil || a.code != "" {
		t.Fatalf("call finishing within the drain: %+v, want its result", a)
	}
	a := <-long
	if a.err != nil || a.code != "UNAVAILABLE" || !strings.Contains(a.text, `"retryable":true`) || !strings.Contains(a.text, "restarting") {
		t.Fatalf("call running at the drain deadline: %+v, want UNAVAILABLE retryable", a)
	}
	if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve: %v", err)
	}
	s.done <- nil // for the cleanup
	proctest.WaitDead(t, pid)
}

// TestShutdownAnswersAnAcceptedConnection: a connection the server accepted
// just before SIGTERM whose request arrives after it (under socket
// activation, one the kernel queued for the old process) gets an answer,
// not an EOF: http.Server.Shutdown alone drops such a request.
func TestShutdownAnswersAnAcceptedConnection(t *testing.T) {
	s := serveBackend(t, nil, nil)
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	proctest.Eventually(t, "the connection accepted", func() bool {
		l := s.srv.conns.Load()
		if l == nil {
			return false
		}
		n, _ := l.open()
		return n >= 1
	})
	s.stop()
	// Shutdown has begun once the listener refuses new connections.
	proctest.Eventually(t, "the listener closed", func() bool {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("request on a connection accepted before shutdown: %v, want an answer", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "UNAVAILABLE") {
		t.Fatalf("answer %d %s, want 200 with UNAVAILABLE (restarting)", resp.StatusCode, b)
	}
}

// TestCrowdedListenerFreesPlaces: past half the connection cap, a socket
// that sends no request in time is closed (its place freed), and answers
// close their connection instead of keeping it alive; below half, neither.
func TestCrowdedListenerFreesPlaces(t *testing.T) {
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.MaxConns, l.ReserveConns = 8, 2 })
	var silent []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	// The first four (below half the cap) stay; the rest are culled.
	proctest.Eventually(t, "silent sockets past half the cap closed", func() bool {
		m := s.intake(t).Intake
		return m.ConnsCulled == 4 && m.ConnsOpen <= 5
	})
	for i, c := range silent {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		closed := err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
		if closed != (i >= 4) {
			t.Fatalf("silent socket %d: closed %v (%v)", i, closed, err)
		}
	}
	// Crowded: an answer closes its connection.
	resp, err := http.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !resp.Close {
		t.Fatal("crowded listener kept a connection alive")
	}
	for _, c := range silent {
		c.Close()
	}
	proctest.Eventually(t, "below half the cap", func() bool { return s.intake(t).Intake.ConnsOpen < 4 })
	resp, err = http.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close {
		t.Fatal("an uncrowded listener closed a keep-alive connection")
	}
}

// TestSlowUploadsDoNotRefuseControl: uploads that declare large (and small)
// bodies and send them a byte at a time hold only the bytes they sent:
// control calls and ordinary uploads beside them are served. Before bytes
// were charged as they arrive, the declared lengths filled the budget and
// its small-body reserve and control calls got OVERLOADED.
func TestSlowUploadsDoNotRefuseControl(t *testing.T) {
	// Each upload sends its first byte and then nothing: the body timeouts
	// (5 s idle) would drop the first ones while a loaded machine still
	// dials the rest, and the bound under test is the bytes held, not time.
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.BodyTimeout, l.BodyIdleTimeout = 10*time.Minute, 10*time.Minute })
	const big, small = 30, 80 // 30 x 6 MiB declared > the 128 MiB budget; 80 x 60 KiB > the 4 MiB reserve
	for i := range big + small {
		size := 6 << 20
		if i >= big {
			size = 60 << 10
		}
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		body := fileWriteBody(i+1, size)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", len(body))
		if _, err := c.Write(body[:1]); err != nil {
			t.Fatal(err)
		}
	}
	proctest.Eventually(t, "every upload started", func() bool { return s.intake(t).Intake.ConnsOpen >= big+small })
	for range 5 {
		status, body, err := callRaw(context.Background(), s.url, "system.info", map[string]any{})
		if err != nil || status != 200 || parseReply(t, body).errorCode() != "" {
			t.Fatalf("system.info beside slow uploads: HTTP %d %v %.300s", status, err, body)
		}
	}
	status, body, err := callRaw(context.Background(), s.url, "file.write", map[string]any{"path": filepath.Join(t.TempDir(), "f"), "content": strings.Repeat("x", 1<<20)})
	if err != nil || status != 200 || parseReply(t, body).errorCode() != "" {
		t.Fatalf("a 1 MiB upload beside slow uploads: HTTP %d %v %.300s", status, err, body)
	}
	if m := s.intake(t).Intake; m.BodyRefused != 0 || m.BodyBytesHeld > 16<<20 {
		t.Fatalf("intake %+v: the slow uploads hold more than they sent", m)
	}
}

// TestUnreadAnswerIsCutOff: a client that sends a call whose answer is
// large and never reads it does not keep the connection, the answer's
// memory or the call's cancel entry: the write deadline ends the answer,
// the handler returns and the connection closes.
func TestUnreadAnswerIsCutOff(t *testing.T) {
	s := serveBackend(t, nil, func(l *HTTPLimits) { l.WriteTimeout = time.Second })
	var clients []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// 4 MiB of NUL bytes: about 24 MB of JSON, far past the socket
		// buffers of a client that reads nothing.
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"shell.exec","arguments":{"command":"head -c 4000000 /dev/zero"}}}`, i+1)
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: unread-%d\r\nContent-Length: %d\r\n\r\n%s", i, len(body), body)
		clients = append(clients, c)
	}
	proctest.Eventually(t, "every call ran", func() bool { return s.metrics(t).Counters.Completed == 4 })
	proctest.Eventually(t, "answers cut off and connections closed", func() bool {
		var m struct {
			intakeMetrics
			Sessions SessionStats `json:"sessions"`
		}
		getJSON(t, s.url+"/metrics", &m)
		return m.Sessions.InFlight == 0 && m.Intake.ConnsOpen <= 1 && m.Intake.BodyBytesHeld == 0
	})
	for _, c := range clients {
		// What arrived is a prefix; then the server closed the connection.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection not closed by the server: %v", err)
		}
	}
}
