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

// HandoffDrainTimeout bounds how long a handoff (SIGUSR2) waits for the
// calls the old slot accepted before it says it is parked; a call still
// running then goes on until it ends or the slot is stopped, and the slot
// says mcpwire.SlotParkedFinishing until then. It is shorter than the
// cutover waits for the old slot to park.
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
//
// A slot moves between four states, each told to systemd as its status
// (mcpwire.Slot*): standby (its own listener only) --Takeover--> accepting
// --Handoff--> handing off (finishing what it accepted) --> parked (serving
// nothing, able to take over again at once) --Takeover--> accepting. A call
// still running when the handoff's drain ends makes it park as
// parked-finishing (as able to take over) until that call is answered. It
// exits only when ctx ends (SIGTERM: systemd stops it).
type Slot struct {
	// Standby, when set, is a listener of the process's own (a loopback
	// port): the process serves there only and does not accept on the
	// shared socket until Takeover, so it can be verified before any
	// production connection reaches it. READY=1 is sent once it serves.
	Standby net.Listener
	// Takeover receives a value when the process is to accept on the
	// shared socket (SIGUSR1): from standby, or again from handing off or
	// parked. Ignored while accepting.
	Takeover <-chan struct{}
	// Handoff receives a value when another process has taken over
	// (SIGUSR2): stop accepting, let every accepted call run to its end
	// (queued ones included), then park. Ignored unless accepting.
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
	// The shared socket is served from the start behind a gate: closed in
	// standby and while handing off or parked, open while accepting.
	gate := newGateListener(ln, slot.Standby == nil)
	capped := newCapListener(gate, s.httpLim.MaxConns, s.httpLim.ReserveConns)
	s.conns.Store(capped)
	// Both listeners feed one http.Server (one connection cap, one drain);
	// errc carries the first Serve error of either, except the standby's
	// end when the handoff closes it.
	errc := make(chan error, 2)
	var standby *capListener
	var standbyClosed atomic.Bool
	go func() { errc <- hs.Serve(capped) }()
	state := mcpwire.SlotAccepting
	if slot.Standby != nil {
		standby = newCapListener(slot.Standby, s.httpLim.MaxConns, s.httpLim.ReserveConns)
		go func() {
			if err := hs.Serve(standby); !standbyClosed.Load() {
				errc <- err
			}
		}()
		state = mcpwire.SlotStandby
	}
	tell := func(st string) {
		state = st
		_, _ = daemon.SdNotify(false, "STATUS="+st)
	}
	tell(state)

	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		s.log.Warn("sd_notify READY failed", "err", err)
	}
	wdCtx, stopWD := context.WithCancel(ctx)
	defer stopWD()
	probe, stopProbe := s.probeEndpoint(ln)
	defer stopProbe()
	go s.feedWatchdog(wdCtx, probe)
	s.log.Info("serving", "listen", ln.Addr().String(), "standby", standby != nil, "maxActive", s.cfg.Concurrency.MaxActive, "maxShell", s.cfg.Concurrency.MaxShell, "maxQueue", s.cfg.Concurrency.MaxQueue)

	// drained is closed when a handoff's calls are answered (or its drain
	// bound passed); stopDrain abandons that wait on a takeover.
	var drained chan struct{}
	stopDrain := func() {}
	defer func() { stopDrain() }()
	// finished is closed when the calls still running as the slot parked
	// are answered; stopFinish abandons that wait on a takeover.
	var finished chan struct{}
	stopFinish := func() {}
	defer func() { stopFinish() }()
wait:
	for {
		select {
		case err := <-errc:
			s.Close()
			return fmt.Errorf("serve: %w", err)
		case <-slot.Takeover:
			if state == mcpwire.SlotAccepting {
				continue
			}
			from := state
			stopDrain()
			drained = nil
			stopFinish()
			finished = nil
			handing.Store(false)
			gate.set(true)
			tell(mcpwire.SlotAccepting)
			s.log.Info("took over the shared socket", "listen", ln.Addr().String(), "from", from)
		case <-slot.Handoff:
			if state != mcpwire.SlotAccepting {
				continue
			}
			// Another process accepts on the shared socket now: every call
			// this one accepted, queued ones included, runs to its end, and
			// each kept-alive connection is closed after its next answer.
			s.log.Info("handing off", "drain", HandoffDrainTimeout.String())
			tell(mcpwire.SlotHandingOff)
			handing.Store(true)
			gate.set(false)
			if standby != nil && !standbyClosed.Load() {
				standbyClosed.Store(true)
				_ = standby.Close()
			}
			d := make(chan struct{})
			dctx, cancel := context.WithTimeout(ctx, HandoffDrainTimeout)
			drained, stopDrain = d, cancel
			go func() {
				defer close(d)
				// Most clients send their next request within the grace: it
				// is answered and its connection closed. Then every call
				// still running has the rest of the drain.
				ictx, icancel := context.WithTimeout(dctx, idleGrace)
				pending.waitClosed(ictx)
				icancel()
				pending.waitAnswered(dctx)
			}()
		case <-drained:
			drained = nil
			stopDrain()
			// Connections never used or idle are closed, as a shutdown
			// would: a client dials ahead and pools them. A call still
			// running past the drain goes on and is answered here.
			unused := pending.closeUnused()
			running := pending.active()
			if running == 0 {
				tell(mcpwire.SlotParked)
				s.log.Info("handed off; parked", "unused", unused, "running", running)
				continue
			}
			// Parked, able to take over at once, but stopping it now would
			// cut those calls: it says so until the last is answered.
			tell(mcpwire.SlotParkedFinishing)
			s.log.Info("handed off; parked, finishing calls", "unused", unused, "running", running)
			f := make(chan struct{})
			fctx, cancel := context.WithCancel(ctx)
			finished, stopFinish = f, cancel
			go func() {
				defer close(f)
				pending.waitAnswered(fctx)
			}()
		case <-finished:
			finished = nil
			stopFinish()
			if state == mcpwire.SlotParkedFinishing {
				tell(mcpwire.SlotParked)
				s.log.Info("parked; the calls accepted before the handoff are answered")
			}
		case <-ctx.Done():
			break wait
		}
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	dctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	s.log.Info("shutting down", "drain", DrainTimeout.String(), "state", state)
	// Queued and new calls are answered UNAVAILABLE at once; running calls
	// have the drain to finish.
	s.beginStopping()
	// http.Server.Shutdown drops a request that it reads after shutdown
	// began: a connection accepted a moment before (under socket
	// activation, one the kernel queued for this process) would see EOF.
	// So first stop accepting and let every accepted connection get its
	// request answered; only then shut down, within the same drain.
	hs.SetKeepAlivesEnabled(false)
	_ = capped.Close()
	if standby != nil {
		standbyClosed.Store(true)
		_ = standby.Close()
	}
	pending.waitQuiet(dctx)
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

// active returns the connections whose call runs now.
func (c *connStates) active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count(http.StateActive)
}

// closeUnused closes the connections that never sent a request (a client
// dials ahead and keeps them in its pool) and the idle ones, as
// http.Server.Shutdown does. It returns how many it closed.
func (c *connStates) closeUnused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for conn, st := range c.st {
		if st == http.StateNew || st == http.StateIdle {
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
