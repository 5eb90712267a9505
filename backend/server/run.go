package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// DrainTimeout is how long in-flight HTTP may drain at shutdown before the
// connections are closed: it keeps restart and rollback bounded inside
// TimeoutStopSec=5 even when saturated.
const DrainTimeout = 2 * time.Second

// HandoffDrainTimeout bounds a handoff's drain (SIGUSR2): the calls the
// old slot accepted run to their end within it while the new slot already
// accepts. It is longer than DrainTimeout because no caller waits on it
// (the shared socket is served meanwhile) and a call cut short is a failed
// call; it is shorter than the cutover waits for the old slot's exit.
const HandoffDrainTimeout = 10 * time.Second

// answerGrace is how long, after the drain deadline, the calls still running
// have to write their UNAVAILABLE answers before the connections close.
const answerGrace = time.Second

// Serve serves HTTP on ln until ctx ends, then shuts down within
// DrainTimeout and kills every running command group. It tells systemd
// READY=1 once listening and keeps its watchdog fed while /healthz answers.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.ServeSlot(ctx, ln, Slot{})
}

// Slot is how a production slot shares its socket with the other slot
// during a cutover: both processes hold the same listening socket (one
// accept queue), and only the one that accepts takes connections from it.
type Slot struct {
	// Standby, when set, is a listener of the process's own (a loopback
	// port): the process serves there only and does not accept on the
	// shared socket until Takeover, so it can be verified before any
	// production connection reaches it. READY=1 is sent once it serves.
	Standby net.Listener
	// Takeover fires when the process is to start accepting on the shared
	// socket (SIGUSR1). Ignored without Standby or once accepting.
	Takeover <-chan struct{}
	// Handoff fires when another process has taken over (SIGUSR2): stop
	// accepting, let every accepted call run to its end (queued ones
	// included) within DrainTimeout, then shut down as on ctx's end.
	Handoff <-chan struct{}
}

// ServeSlot is Serve for one production slot (see Slot).
func (s *Server) ServeSlot(ctx context.Context, ln net.Listener, slot Slot) error {
	var handing atomic.Bool
	hs := &http.Server{
		Handler:           closeAfterHandoff(&handing, s.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
		ConnContext:       connContext,
	}
	var pending connStates
	hs.ConnState = pending.track
	capped := newCapListener(ln, s.httpLim.MaxConns, s.httpLim.ReserveConns)
	s.conns.Store(capped)
	// Both listeners feed one http.Server (one connection cap, one drain);
	// errc carries the first Serve error of either.
	errc := make(chan error, 2)
	serve := func(l net.Listener) { errc <- hs.Serve(l) }
	var standby *capListener
	takeover := slot.Takeover
	if slot.Standby != nil {
		standby = newCapListener(slot.Standby, s.httpLim.MaxConns, s.httpLim.ReserveConns)
		go serve(standby)
		_, _ = daemon.SdNotify(false, "STATUS="+mcpwire.SlotStandby)
	} else {
		go serve(capped)
		takeover = nil
		_, _ = daemon.SdNotify(false, "STATUS="+mcpwire.SlotAccepting)
	}

	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		s.log.Warn("sd_notify READY failed", "err", err)
	}
	wdCtx, stopWD := context.WithCancel(ctx)
	defer stopWD()
	probe, stopProbe := s.probeEndpoint(ln)
	defer stopProbe()
	go s.feedWatchdog(wdCtx, probe)
	s.log.Info("serving", "listen", ln.Addr().String(), "standby", standby != nil, "maxActive", s.cfg.Concurrency.MaxActive, "maxShell", s.cfg.Concurrency.MaxShell, "maxQueue", s.cfg.Concurrency.MaxQueue)

	handoff := false
wait:
	for {
		select {
		case err := <-errc:
			s.Close()
			return fmt.Errorf("serve: %w", err)
		case <-takeover:
			takeover = nil
			go serve(capped)
			_, _ = daemon.SdNotify(false, "STATUS="+mcpwire.SlotAccepting)
			s.log.Info("took over the shared socket", "listen", ln.Addr().String())
		case <-slot.Handoff:
			handoff = true
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	drain := DrainTimeout
	if handoff {
		drain = HandoffDrainTimeout
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if !handoff {
		s.log.Info("shutting down", "drain", DrainTimeout.String())
		// Queued and new calls are answered UNAVAILABLE at once; running
		// calls have the drain to finish.
		s.beginStopping()
	}
	// http.Server.Shutdown drops a request that it reads after shutdown
	// began: a connection accepted a moment before (under socket
	// activation, one the kernel queued for this process) would see EOF.
	// So first stop accepting and let every accepted connection get its
	// request answered; only then shut down, within the same drain.
	if handoff {
		// Another process accepts on the shared socket now: every call
		// this one accepted, queued ones included, runs to its end within
		// the drain, and each kept-alive connection is closed after its
		// next answer (or, idle, at the drain's end); only what is left
		// then is answered UNAVAILABLE.
		s.log.Info("handing off", "drain", drain.String())
		_, _ = daemon.SdNotify(false, "STATUS="+mcpwire.SlotHandingOff)
		handing.Store(true)
		_ = capped.Close()
		if standby != nil {
			_ = standby.Close()
		}
		// Most clients send their next request within the grace: it is
		// answered and its connection closed. Then every call still
		// running has the rest of the drain; connections still idle or
		// never used are closed (a client dials ahead and pools them).
		ictx, icancel := context.WithTimeout(dctx, idleGrace)
		pending.waitClosed(ictx)
		icancel()
		pending.waitAnswered(dctx)
		unused := pending.closeUnused()
		s.log.Info("handed off", "unused", unused)
		hs.SetKeepAlivesEnabled(false)
		s.beginStopping()
	} else {
		hs.SetKeepAlivesEnabled(false)
		_ = capped.Close()
		if standby != nil {
			_ = standby.Close()
		}
		pending.waitQuiet(dctx)
	}
	err := hs.Shutdown(dctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Every call still running is answered UNAVAILABLE on its own
		// connection; only then do the connections close and the command
		// groups die.
		s.log.Warn("drain timed out; answering the calls still running")
		s.abandonRunning()
		gctx, gcancel := context.WithTimeout(context.Background(), answerGrace)
		err = hs.Shutdown(gctx)
		gcancel()
		if errors.Is(err, context.DeadlineExceeded) {
			s.log.Warn("answers not written in time; closing connections")
			err = hs.Close()
		}
	}
	s.Close()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// idleGrace is how long a handoff waits for a kept-alive connection's next
// request (answered, then the connection closed) before it closes the
// connections still idle.
const idleGrace = time.Second

// selfProbe is how the watchdog reaches /healthz: a client and its URL.
type selfProbe struct {
	transport http.RoundTripper
	url       string
}

// probeEndpoint serves /healthz for the watchdog's self-probe on a listener
// of its own, an abstract unix socket (no port, no file): the connection cap
// of the public listener, full of silent or slow sockets under a flood, can
// never make a busy backend miss its watchdog. The probe still needs the
// process's scheduler, network poller and HTTP stack to answer, so a wedged
// process is still caught. If no such socket can be had it probes ln.
func (s *Server) probeEndpoint(ln net.Listener) (selfProbe, func()) {
	var name [8]byte
	_, _ = rand.Read(name[:])
	addr := "@mcp-backend-probe-" + hex.EncodeToString(name[:])
	pl, err := net.Listen("unix", addr)
	if err != nil {
		s.log.Warn("watchdog probe on the public listener", "reason", err.Error())
		return selfProbe{http.DefaultTransport, "http://" + ln.Addr().String() + "/healthz"}, func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	ps := &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second}
	go func() { _ = ps.Serve(pl) }()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", addr)
	}}
	return selfProbe{tr, "http://probe/healthz"}, func() { _ = ps.Close(); tr.CloseIdleConnections() }
}

// feedWatchdog sends WATCHDOG=1 at half the interval systemd asks for, only
// while a self-probe of /healthz answers: a busy backend is alive, a wedged
// one is not.
func (s *Server) feedWatchdog(ctx context.Context, p selfProbe) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	client := &http.Client{Timeout: interval / 2, Transport: p.transport}
	url := p.url
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if probe(ctx, client, url) {
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		} else {
			s.log.Warn("healthz self-probe failed; not feeding the watchdog")
		}
	}
}

func probe(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ServeStdio serves the same tools over stdio until the client closes or
// ctx ends. The process has its own controller, as the spec asks.
func (s *Server) ServeStdio(ctx context.Context, t mcp.Transport) error {
	// The SDK waits for calls in flight before Run returns: cancel them
	// (queued calls leave, commands die) as soon as shutdown starts.
	stop := context.AfterFunc(ctx, s.Close)
	defer stop()
	defer s.Close()
	err := s.mcp.Run(ctx, t)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// connStates tracks the accepted connections not yet closed and their
// state: busy ones (new, request not read yet, and active) wait for their
// answer.
type connStates struct {
	mu      sync.Mutex
	st      map[net.Conn]http.ConnState
	changed chan struct{} // closed and replaced at every change
}

func (c *connStates) track(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == nil {
		c.st = map[net.Conn]http.ConnState{}
	}
	switch st {
	case http.StateNew, http.StateActive, http.StateIdle:
		c.st[conn] = st
	default:
		delete(c.st, conn)
	}
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// count returns the connections in any of states.
func (c *connStates) count(states ...http.ConnState) int {
	n := 0
	for _, st := range c.st {
		if slices.Contains(states, st) {
			n++
		}
	}
	return n
}

// waitQuiet returns once no accepted connection waits for its answer, or
// when ctx ends.
func (c *connStates) waitQuiet(ctx context.Context) {
	c.waitUntil(ctx, func() bool { return c.count(http.StateNew, http.StateActive) == 0 })
}

// waitClosed returns once every accepted connection is closed, or when ctx
// ends.
func (c *connStates) waitClosed(ctx context.Context) {
	c.waitUntil(ctx, func() bool { return len(c.st) == 0 })
}

// waitAnswered returns once no call runs (no active connection), or when
// ctx ends.
func (c *connStates) waitAnswered(ctx context.Context) {
	c.waitUntil(ctx, func() bool { return c.count(http.StateActive) == 0 })
}

// closeUnused closes the connections that never sent a request: a client
// dials ahead and keeps them in its pool. It returns how many it closed.
func (c *connStates) closeUnused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for conn, st := range c.st {
		if st == http.StateNew {
			_ = conn.Close()
			n++
		}
	}
	return n
}

func (c *connStates) waitUntil(ctx context.Context, done func() bool) {
	for {
		c.mu.Lock()
		if done() {
			c.mu.Unlock()
			return
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// closeAfterHandoff answers every request with Connection: close once
// handing is set: a client's kept-alive connection is closed right after
// an answer, never while idle, when the client may be sending its next
// request on it (that request would be lost); its next request connects
// again and reaches the process that accepts now.
func closeAfterHandoff(handing *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handing.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
