package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DrainTimeout is how long in-flight HTTP may drain at shutdown before the
// connections are closed: it keeps restart and rollback bounded inside
// TimeoutStopSec=5 even when saturated.
const DrainTimeout = 2 * time.Second

// answerGrace is how long, after the drain deadline, the calls still running
// have to write their UNAVAILABLE answers before the connections close.
const answerGrace = time.Second

// Serve serves HTTP on ln until ctx ends, then shuts down within
// DrainTimeout and kills every running command group. It tells systemd
// READY=1 once listening and keeps its watchdog fed while /healthz answers.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
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
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(capped) }()

	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		s.log.Warn("sd_notify READY failed", "err", err)
	}
	wdCtx, stopWD := context.WithCancel(ctx)
	defer stopWD()
	probe, stopProbe := s.probeEndpoint(ln)
	defer stopProbe()
	go s.feedWatchdog(wdCtx, probe)
	s.log.Info("serving", "listen", ln.Addr().String(), "maxActive", s.cfg.Concurrency.MaxActive, "maxShell", s.cfg.Concurrency.MaxShell, "maxQueue", s.cfg.Concurrency.MaxQueue)

	select {
	case err := <-errc:
		s.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	s.log.Info("shutting down", "drain", DrainTimeout.String())
	// Stop accepting; queued and new calls are answered UNAVAILABLE at
	// once; running calls have the drain to finish.
	s.beginStopping()
	dctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	// http.Server.Shutdown drops a request that it reads after shutdown
	// began: a connection accepted a moment before (under socket
	// activation, one the kernel queued for this process) would see EOF.
	// So first stop accepting and let every accepted connection get its
	// request answered; only then shut down, within the same drain.
	hs.SetKeepAlivesEnabled(false)
	_ = capped.Close()
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

// connStates counts the connections that were accepted and have not yet
// had their answer written: new ones (request not read yet) and active ones.
type connStates struct {
	mu    sync.Mutex
	busy  map[net.Conn]bool
	quiet chan struct{} // closed and replaced whenever busy becomes empty
}

func (c *connStates) track(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy == nil {
		c.busy = map[net.Conn]bool{}
	}
	switch st {
	case http.StateNew, http.StateActive:
		c.busy[conn] = true
	default:
		delete(c.busy, conn)
	}
	if len(c.busy) == 0 && c.quiet != nil {
		close(c.quiet)
		c.quiet = nil
	}
}

// waitQuiet returns once no accepted connection waits for its answer, or
// when ctx ends.
func (c *connStates) waitQuiet(ctx context.Context) {
	c.mu.Lock()
	if len(c.busy) == 0 {
		c.mu.Unlock()
		return
	}
	if c.quiet == nil {
		c.quiet = make(chan struct{})
	}
	q := c.quiet
	c.mu.Unlock()
	select {
	case <-q:
	case <-ctx.Done():
	}
}
