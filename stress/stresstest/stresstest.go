// Package stresstest is a small fake mcp-backend for testing the stress
// itself: real MCP Streamable HTTP (go-sdk, stateless), real commands in
// their own process groups, a process-wide admission controller and the
// /metrics, /healthz and /readyz endpoints of the real backend. Options make it
// break one contract at a time (run more shell commands than it claims,
// serialize, answer 500 under load, ...), so tests can show each check of
// the stress fails when it should.
package stresstest

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// Options configure the fake. Zero values behave correctly.
type Options struct {
	// Limits are what /metrics reports and, unless overridden below, what
	// admission enforces.
	Limits mcpwire.Limits
	// RealShell, if > 0, is the shell concurrency actually allowed. With
	// LieShell the metrics never show more than Limits.MaxShell.
	RealShell int
	LieShell  bool
	// Fail500Above answers HTTP 500 to /mcp requests while more than this
	// many are in flight (0: never).
	Fail500Above int
	// HealthFailAbove answers /healthz with 503 while more than this many
	// /mcp requests are in flight (0: never).
	HealthFailAbove int
	// ControlDelay delays every control tool.
	ControlDelay time.Duration
	// LeakEvery makes every n-th shell.exec never release its slot.
	LeakEvery int
	// IgnoreDisconnect runs tools on a context that a client's disconnect
	// does not cancel (the go-sdk's stateless default).
	IgnoreDisconnect bool
	// KillLeaderOnly kills only the shell, not its process group, on
	// timeout or cancellation: grandchildren survive.
	KillLeaderOnly bool
	// JSONResponse answers application/json instead of SSE.
	JSONResponse bool
	// OutputBytes caps shell output (default 256 KiB).
	OutputBytes int
}

// DefaultLimits are small limits for tests.
var DefaultLimits = mcpwire.Limits{MaxActive: 12, ReservedControl: 2, MaxNonControl: 10, MaxShell: 4, MaxQueue: 8, QueueWaitMs: 2000}

// Server is a running fake backend.
type Server struct {
	URL string // http://127.0.0.1:PORT
	adm *admission
	hs  *httptest.Server
}

// Start runs the fake on a free loopback port until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Limits == (mcpwire.Limits{}) {
		opts.Limits = DefaultLimits
	}
	if opts.OutputBytes == 0 {
		opts.OutputBytes = 256 << 10
	}
	realShell := opts.Limits.MaxShell
	if opts.RealShell > 0 {
		realShell = opts.RealShell
	}
	adm := &admission{lim: opts.Limits, shellCap: realShell, lie: opts.LieShell, wake: make(chan struct{})}
	groups := &groups{m: map[int]bool{}}
	var inflight atomic.Int64
	mcpHandler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return newMCPServer(r.Context(), adm, groups, opts)
	}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: opts.JSONResponse})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		if opts.Fail500Above > 0 && n > int64(opts.Fail500Above) {
			http.Error(w, "too busy", http.StatusInternalServerError)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if opts.HealthFailAbove > 0 && inflight.Load() > int64(opts.HealthFailAbove) {
			http.Error(w, `{"status":"busy"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(adm.snapshot())
	})
	hs := httptest.NewUnstartedServer(mux)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	hs.Listener = l
	hs.Start()
	t.Cleanup(func() {
		// Commands a broken fake let live would hold Close up: kill them.
		groups.killAll()
		hs.Close()
	})
	return &Server{URL: hs.URL, adm: adm, hs: hs}
}

// Metrics returns the fake's current snapshot.
func (s *Server) Metrics() mcpwire.Metrics { return s.adm.snapshot() }

// groups tracks the process groups of running commands.
type groups struct {
	mu sync.Mutex
	m  map[int]bool
}

func (g *groups) add(pgid int) { g.mu.Lock(); g.m[pgid] = true; g.mu.Unlock() }

func (g *groups) killAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pgid := range g.m {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

func newMCPServer(reqCtx context.Context, adm *admission, grp *groups, opts Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "stresstest", Version: "0"}, nil)
	obj := map[string]any{"type": "object"}
	add := func(name string, fn func(ctx context.Context, args map[string]any) (any, *toolError)) {
		class := mcpwire.ClassOf(name)
		s.AddTool(&mcp.Tool{Name: name, InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if !opts.IgnoreDisconnect {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				stop := context.AfterFunc(reqCtx, cancel)
				defer stop()
			}
			var args map[string]any
			if len(req.Params.Arguments) > 0 {
				if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
					return errResult(&toolError{mcpwire.CodeInvalidArgument, err.Error()}), nil
				}
			}
			release, code := adm.acquire(ctx, class)
			if code != "" {
				return errResult(&toolError{code, "admission: " + string(code)}), nil
			}
			defer release()
			out, terr := fn(ctx, args)
			if terr != nil {
				return errResult(terr), nil
			}
			b, _ := json.Marshal(out)
			return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
		})
	}
	add(mcpwire.ToolShellExec, func(ctx context.Context, args map[string]any) (any, *toolError) {
		if opts.LeakEvery > 0 && adm.shellCalls.Add(1)%int64(opts.LeakEvery) == 0 {
			adm.leak()
		}
		cmd, _ := args["command"].(string)
		timeout := 60 * time.Second
		if ms, ok := args["timeoutMs"].(float64); ok && ms > 0 {
			timeout = time.Duration(ms) * time.Millisecond
		}
		return runShell(ctx, cmd, timeout, grp, opts)
	})
	add(mcpwire.ToolFileList, func(context.Context, map[string]any) (any, *toolError) {
		return map[string]any{"entries": []any{map[string]any{"name": "etc", "type": "dir"}}}, nil
	})
	add(mcpwire.ToolFileRead, func(context.Context, map[string]any) (any, *toolError) {
		return map[string]any{"content": "ID=debian\n", "encoding": "utf-8"}, nil
	})
	control := func(context.Context, map[string]any) (any, *toolError) {
		time.Sleep(opts.ControlDelay)
		return map[string]any{"ok": true}, nil
	}
	add(mcpwire.ToolSystemInfo, control)
	add(mcpwire.ToolProcessList, control)
	return s
}

type toolError struct {
	code mcpwire.Code
	msg  string
}

// errResult renders a failure the way the backend does: the envelope as
// the JSON text content and in _meta, no structuredContent.
func errResult(e *toolError) *mcp.CallToolResult {
	env := mcpwire.ErrorEnvelope{Error: &mcpwire.ToolError{Code: e.code, Message: e.msg, Retryable: e.code.Retryable()}}
	b, _ := json.Marshal(env)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, Meta: mcp.Meta{mcpwire.ErrorMetaKey: json.RawMessage(b)}}
}

// capped keeps the first n bytes and calls over once when more arrive.
type capped struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	n       int
	limited bool
	over    func()
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.n - c.buf.Len(); len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		if !c.limited {
			c.limited = true
			go c.over()
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func runShell(ctx context.Context, command string, timeout time.Duration, grp *groups, opts Options) (any, *toolError) {
	cmd := exec.Command("/bin/bash", "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	kill := func() {
		if cmd.Process == nil {
			return
		}
		if opts.KillLeaderOnly {
			_ = cmd.Process.Kill()
			return
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out := &capped{n: opts.OutputBytes, over: kill}
	errb := &capped{n: 64 << 10, over: func() {}}
	cmd.Stdout, cmd.Stderr = out, errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, &toolError{mcpwire.CodeInternal, err.Error()}
	}
	grp.add(cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timedOut := false
	select {
	case <-done:
	case <-time.After(timeout):
		timedOut = true
		kill()
		<-done
	case <-ctx.Done():
		kill()
		<-done
		return nil, &toolError{mcpwire.CodeCancelled, "cancelled while running"}
	}
	res := mcpwire.ShellResult{Stdout: out.String(), Stderr: errb.String(), TimedOut: timedOut, OutputLimited: out.limited, DurationMs: time.Since(t0).Milliseconds()}
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		res.ExitCode = new(cmd.ProcessState.ExitCode())
	}
	return res, nil
}

// admission is a process-wide controller with a bounded, timed queue.
type admission struct {
	mu       sync.Mutex
	lim      mcpwire.Limits
	shellCap int
	lie      bool
	wake     chan struct{} // closed and replaced on every release

	active, control, nonControl, shell int
	queued, queuedControl, queuedNon   int
	peak                               mcpwire.Peak
	c                                  mcpwire.Counters
	leaked                             int
	shellCalls                         atomic.Int64
}

func (a *admission) canStart(class mcpwire.Class) bool {
	if a.active >= a.lim.MaxActive {
		return false
	}
	if class != mcpwire.ClassControl && a.nonControl >= a.lim.MaxNonControl {
		return false
	}
	return class != mcpwire.ClassShell || a.shell < a.shellCap
}

func (a *admission) take(class mcpwire.Class) {
	a.active++
	if class == mcpwire.ClassControl {
		a.control++
	} else {
		a.nonControl++
	}
	if class == mcpwire.ClassShell {
		a.shell++
	}
	a.c.Accepted++
	a.peak.Active = max(a.peak.Active, int64(a.active))
	a.peak.NonControl = max(a.peak.NonControl, int64(a.nonControl))
	a.peak.Shell = max(a.peak.Shell, int64(a.reportShell(a.shell)))
}

func (a *admission) reportShell(n int) int {
	if a.lie {
		return min(n, a.lim.MaxShell)
	}
	return n
}

func (a *admission) setQueued(class mcpwire.Class, d int) {
	a.queued += d
	if class == mcpwire.ClassControl {
		a.queuedControl += d
	} else {
		a.queuedNon += d
	}
	a.peak.Queued = max(a.peak.Queued, int64(a.queued))
}

// acquire returns a release func, or an OVERLOADED or CANCELLED code.
func (a *admission) acquire(ctx context.Context, class mcpwire.Class) (func(), mcpwire.Code) {
	a.mu.Lock()
	if a.canStart(class) {
		a.take(class)
		a.mu.Unlock()
		return a.releaser(class), ""
	}
	if a.queued >= a.lim.MaxQueue {
		a.c.Rejected++
		a.mu.Unlock()
		return nil, mcpwire.CodeOverloaded
	}
	a.setQueued(class, +1)
	timer := time.NewTimer(a.lim.QueueWait())
	defer timer.Stop()
	for {
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			a.mu.Lock()
			a.setQueued(class, -1)
			a.c.TimedOut++
			a.mu.Unlock()
			return nil, mcpwire.CodeOverloaded
		case <-ctx.Done():
			a.mu.Lock()
			a.setQueued(class, -1)
			a.c.Cancelled++
			a.mu.Unlock()
			return nil, mcpwire.CodeCancelled
		}
		a.mu.Lock()
		if a.canStart(class) {
			a.setQueued(class, -1)
			a.take(class)
			a.mu.Unlock()
			return a.releaser(class), ""
		}
	}
}

func (a *admission) releaser(class mcpwire.Class) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.leaked > 0 {
				a.leaked--
				return // the slot stays taken forever
			}
			a.active--
			if class == mcpwire.ClassControl {
				a.control--
			} else {
				a.nonControl--
			}
			if class == mcpwire.ClassShell {
				a.shell--
			}
			a.c.Completed++
			close(a.wake)
			a.wake = make(chan struct{})
		})
	}
}

func (a *admission) leak() {
	a.mu.Lock()
	a.leaked++
	a.mu.Unlock()
}

func (a *admission) snapshot() mcpwire.Metrics {
	a.mu.Lock()
	defer a.mu.Unlock()
	return mcpwire.Metrics{
		Limits:   a.lim,
		Active:   mcpwire.Active{Total: int64(a.active), Control: int64(a.control), NonControl: int64(a.nonControl), Shell: int64(a.reportShell(a.shell))},
		Queued:   mcpwire.Queued{Total: int64(a.queued), Control: int64(a.queuedControl), NonControl: int64(a.queuedNon)},
		Peak:     a.peak,
		Counters: a.c,
	}
}
