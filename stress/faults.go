package stress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// faultEnv is what the fault injections need.
type faultEnv struct {
	target        *Client
	base          string
	limits        mcpwire.Limits
	responseBytes int64
	log           *slog.Logger
}

// faultIDs keeps fault calls' JSON-RPC ids apart from the attack's.
var faultIDs atomic.Uint64

func init() { faultIDs.Store(1 << 40) }

// runFaults injects the faults one after the other on the (idle) target.
// Each is bounded in time; a fault that cannot be set up records why.
func runFaults(ctx context.Context, env faultEnv) FaultFacts {
	var ff FaultFacts
	var sent int
	ff.QueuedDisconnect, ff.RunningDisconnect, sent = disconnects(ctx, env)
	ff.ToolCalls += sent
	var n int
	ff.Grandchildren, n = grandchildren(ctx, env)
	ff.ToolCalls += n
	for _, fl := range []struct{ name, cmd string }{
		{"text", "head -c 16777216 /dev/zero | tr '\\0' x"},
		{"nul", "head -c 16777216 /dev/zero"},
		{"binary", "head -c 8388608 /dev/urandom"},
	} {
		f := flood(ctx, env, fl.name, fl.cmd)
		ff.Floods = append(ff.Floods, f)
		ff.ToolCalls++
		if f.Code == string(mcpwire.CodeOverloaded) {
			ff.Overloaded++
		}
	}
	var ok bool
	ff.Oversized, ok = oversized(ctx, env)
	if ok {
		ff.ToolCalls++ // the tool call made afterwards to prove the backend fine
	}
	var sentSlow bool
	ff.SlowClient, sentSlow = slowClient(ctx, env)
	if sentSlow {
		ff.ToolCalls++
	}
	return ff
}

// faultClient sends one tools/call and returns status, content type and
// the body (read up to limit bytes).
func faultCall(ctx context.Context, base string, id uint64, tool string, args any, limit int64) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/mcp", bytes.NewReader(callBody(id, tool, args)))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header = mcpclient.Header("")
	// A server that refuses on Content-Length answers and closes with the
	// body unread, and the kernel resets the connection: a client still
	// writing then gets the reset instead of the answer (net/http returns
	// the write error first), more often the busier the machine. With
	// Expect: 100-continue such a server answers before any body is sent;
	// one that wants the body asks for it, and gets all 32 MiB.
	req.Header.Set("Expect", "100-continue")
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, ExpectContinueTimeout: 10 * time.Second}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, err
}

// procsWith lists the pids whose command line contains marker. Zombies have
// an empty command line and so never match: they are dead already.
func procsWith(marker string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pollUntil calls cond every 25ms until it returns true or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func marker(kind string) string {
	return fmt.Sprintf("mcpctl-stress-%s-%d-%d", kind, os.Getpid(), time.Now().UnixNano())
}

// disconnects fills every shell slot with long sleepers, queues a few more
// calls behind them, drops the queued clients (they must leave the queue as
// cancelled), then drops the running ones (their commands must die and the
// slots come back).
func disconnects(ctx context.Context, env faultEnv) (queued, running DisconnectFacts, sent int) {
	mark := marker("run")
	runCtx, dropRunners := context.WithCancel(ctx)
	defer dropRunners()
	var wg sync.WaitGroup
	defer wg.Wait()
	n := env.limits.MaxShell
	running.Sent = n
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _, _ = faultCall(runCtx, env.base, faultIDs.Add(1), mcpwire.ToolShellExec,
				map[string]any{"command": "exec -a " + mark + " sleep 20", "timeoutMs": 30000}, 1<<20)
		}()
	}
	sent += n
	pollUntil(ctx, 5*time.Second, func() bool {
		m, err := env.target.Metrics(ctx)
		if err == nil {
			running.Seen = max(running.Seen, int(m.Active.Shell))
		}
		running.ProcsSeen = max(running.ProcsSeen, len(procsWith(mark)))
		return running.Seen >= n && running.ProcsSeen >= n
	})
	if running.Seen < n {
		running.Err = fmt.Sprintf("only %d of %d shell slots filled", running.Seen, n)
	}

	// Queue a few calls behind the full shell slots, then leave.
	if q := min(env.limits.MaxQueue, 3); q > 0 && running.Err == "" {
		queued.Sent = q
		before, err := env.target.Metrics(ctx)
		if err != nil {
			queued.Err = err.Error()
		}
		qCtx, dropQueued := context.WithCancel(ctx)
		var qwg sync.WaitGroup
		for range q {
			qwg.Add(1)
			go func() {
				defer qwg.Done()
				_, _, _, _ = faultCall(qCtx, env.base, faultIDs.Add(1), mcpwire.ToolShellExec,
					map[string]any{"command": "true"}, 1<<20)
			}()
		}
		sent += q
		pollUntil(ctx, 3*time.Second, func() bool {
			m, err := env.target.Metrics(ctx)
			if err == nil {
				queued.Seen = max(queued.Seen, int(m.Queued.Total))
			}
			return queued.Seen >= q
		})
		dropQueued()
		qwg.Wait()
		queued.Released = pollUntil(ctx, 3*time.Second, func() bool {
			m, err := env.target.Metrics(ctx)
			if err != nil {
				return false
			}
			queued.CancelledDelta = m.Counters.Cancelled - before.Counters.Cancelled
			return m.Queued.Total == 0 && queued.CancelledDelta >= int64(q)
		})
	} else if q == 0 {
		queued.Err = "maxQueue is 0: nothing can queue"
	} else {
		queued.Err = "shell slots never filled: " + running.Err
	}

	// Now leave the running ones.
	dropRunners()
	wg.Wait()
	running.Released = pollUntil(ctx, 5*time.Second, func() bool {
		m, err := env.target.Metrics(ctx)
		return err == nil && m.Active.Total == 0
	})
	pollUntil(ctx, 3*time.Second, func() bool { return len(procsWith(mark)) == 0 })
	running.ProcsLeft = len(procsWith(mark))
	return queued, running, sent
}

// grandchildren runs a command that leaves two background grandchildren and
// times out: the whole process group must die with it.
func grandchildren(ctx context.Context, env faultEnv) (ProcFacts, int) {
	var pf ProcFacts
	mark := marker("gc")
	cmd := fmt.Sprintf("(exec -a %s sleep 30) & (exec -a %s sleep 30) & echo started; sleep 30", mark, mark)
	done := make(chan struct{})
	var status int
	var ctype string
	var body []byte
	var err error
	id := faultIDs.Add(1)
	go func() {
		defer close(done)
		status, ctype, body, err = faultCall(ctx, env.base, id, mcpwire.ToolShellExec,
			map[string]any{"command": cmd, "timeoutMs": 1500}, 8<<20)
	}()
	func() {
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			pf.ProcsSeen = max(pf.ProcsSeen, len(procsWith(mark)))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	if err != nil {
		pf.Err = err.Error()
		return pf, 1
	}
	rep := Classify(id, status, "", ctype, body)
	pf.Outcome, pf.Code = rep.Outcome, rep.Code
	if sh, err := rep.Shell(); err == nil {
		pf.TimedOut = sh.TimedOut
	}
	pollUntil(ctx, 3*time.Second, func() bool { return len(procsWith(mark)) == 0 })
	pf.ProcsLeft = len(procsWith(mark))
	return pf, 1
}

// flood runs a command whose output is far above limits.outputBytes and
// measures the JSON-RPC response the server sends back.
func flood(ctx context.Context, env faultEnv, name, cmd string) FloodFacts {
	f := FloodFacts{Name: name}
	id := faultIDs.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	status, ctype, body, err := faultCall(ctx, env.base, id, mcpwire.ToolShellExec,
		map[string]any{"command": cmd, "timeoutMs": 20000}, 4*env.responseBytes+(1<<20))
	f.Status = status
	if err != nil {
		f.Err = err.Error()
		return f
	}
	// The budget is on the JSON-RPC message; SSE framing adds a few bytes.
	f.BodyBytes = int64(len(body))
	if msgs, err := mcpclient.Messages(ctype, body); err == nil {
		f.BodyBytes = 0
		for _, m := range msgs {
			f.BodyBytes = max(f.BodyBytes, int64(len(m)))
		}
	}
	rep := Classify(id, status, "", ctype, body)
	f.Outcome, f.Code = rep.Outcome, rep.Code
	if rep.Outcome == OutcomeOK {
		if sh, err := rep.Shell(); err == nil {
			f.OutputLimited = sh.OutputLimited
		}
	}
	return f
}

// oversized posts a 32 MiB tools/call and then checks the backend still
// answers. ok says whether the follow-up tool call was sent.
func oversized(ctx context.Context, env faultEnv) (OversizedFacts, bool) {
	const size = 32 << 20
	of := OversizedFacts{BodyBytes: size}
	pad := bytes.Repeat([]byte("x"), size)
	body := callBody(faultIDs.Add(1), mcpwire.ToolSystemInfo, map[string]any{"pad": string(pad)})
	of.BodyBytes = int64(len(body))
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimSuffix(env.base, "/")+"/mcp", bytes.NewReader(body))
	if err != nil {
		of.Err = err.Error()
		return of, false
	}
	req.Header = mcpclient.Header("")
	// A server that refuses on Content-Length answers and closes with the
	// body unread, and the kernel resets the connection: a client still
	// writing then gets the reset instead of the answer (net/http returns
	// the write error first), more often the busier the machine. With
	// Expect: 100-continue such a server answers before any body is sent;
	// one that wants the body asks for it, and gets all 32 MiB.
	req.Header.Set("Expect", "100-continue")
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, ExpectContinueTimeout: 10 * time.Second}}
	resp, err := c.Do(req)
	if err != nil {
		of.Err = "no response: " + err.Error()
	} else {
		of.Status = resp.StatusCode
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	code, herr := env.target.Health(ctx)
	of.HealthyAfter = herr == nil && code == http.StatusOK
	id := faultIDs.Add(1)
	status, ctype, rb, err := faultCall(ctx, env.base, id, mcpwire.ToolSystemInfo, map[string]any{}, 8<<20)
	if err == nil {
		of.CallOKAfter = Classify(id, status, "", ctype, rb).Outcome == OutcomeOK
	}
	return of, true
}

// slowClient asks for a couple of MiB of output over a connection with a
// tiny receive buffer and reads the response a little at a time, so the
// server's writes block on the client.
func slowClient(ctx context.Context, env faultEnv) (sf SlowFacts, sent bool) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	u := strings.TrimPrefix(strings.TrimSuffix(env.base, "/"), "http://")
	conn, err := d.DialContext(ctx, "tcp", u)
	if err != nil {
		sf.Err = err.Error()
		return sf, sent
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	id := faultIDs.Add(1)
	req, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(env.base, "/")+"/mcp",
		bytes.NewReader(callBody(id, mcpwire.ToolShellExec, map[string]any{"command": "head -c 2097152 /dev/zero | tr '\\0' y", "timeoutMs": 20000})))
	if err != nil {
		sf.Err = err.Error()
		return sf, sent
	}
	req.Header = mcpclient.Header("")
	t0 := time.Now()
	if err := req.Write(conn); err != nil {
		sf.Err = "write request: " + err.Error()
		return sf, sent
	}
	sent = true
	br := bufio.NewReaderSize(&slowReader{r: conn, rate: 1.5 * (1 << 20), began: time.Now()}, 4096)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		sf.Err = "read response: " + err.Error()
		return sf, sent
	}
	defer resp.Body.Close()
	sf.Status = resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4*env.responseBytes))
	sf.Took = millis.Duration(time.Since(t0))
	sf.BodyBytes = int64(len(body))
	if err != nil {
		sf.Err = "read body: " + err.Error()
		return sf, sent
	}
	sf.Outcome = Classify(id, resp.StatusCode, "", resp.Header.Get("Content-Type"), body).Outcome
	return sf, sent
}

// slowReader reads no faster than rate bytes per second.
type slowReader struct {
	r     io.Reader
	rate  float64
	began time.Time
	n     int64
}

func (s *slowReader) Read(p []byte) (int, error) {
	if ahead := time.Duration(float64(s.n)/s.rate*float64(time.Second)) - time.Since(s.began); ahead > 0 {
		time.Sleep(ahead)
	}
	if len(p) > 8<<10 {
		p = p[:8<<10]
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	return n, err
}
