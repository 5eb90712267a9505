package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Shutdown happens in two steps, so nothing a client sent is dropped:
// stopping (new and queued calls are answered UNAVAILABLE at once, running
// ones go on) and, at the drain deadline, abandoning (every call still
// running is answered UNAVAILABLE on its own connection; its command group
// is killed only after that answer is written).

func restartError() *toolerr.Error {
	return toolerr.New(mcpwire.CodeUnavailable, "backend restarting; retry")
}

// beginStopping answers queued and new calls UNAVAILABLE from now on. The
// controller stops first, so a call that ends during the drain frees its
// slot for no one: no queued call starts once shutdown has begun.
func (s *Server) beginStopping() {
	s.adm.Stop()
	s.stopping()
	s.jobs.drain() // waits answer with the job's status; the jobs go on
}

// abandonRunning answers every call still running UNAVAILABLE.
func (s *Server) abandonRunning() { s.abandon() }

// recovered runs a tool call's handler: a panic in it becomes one INTERNAL
// tool error, so that no tool takes the backend (and every other
// conversation) down with it. The one place a call's panic is recovered,
// for the calls runCall runs and for job.wait's.
func (s *Server) recovered(ctx context.Context, tool string, run func(context.Context) (mcp.Result, error)) (res mcp.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("tool panicked", "tool", tool, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = toolerr.Result(toolerr.New(mcpwire.CodeInternal, "%s: internal error", tool)), nil
		}
	}()
	return run(ctx)
}

// runCall runs a tool call so that the drain can answer it before it ends.
// The call's own cancellation (client gone, notifications/cancelled,
// Close) reaches it as before, except once it has been abandoned: then its
// group dies with Close, after the UNAVAILABLE answer went out.
func (s *Server) runCall(ctx context.Context, tool string, run func(context.Context) (mcp.Result, error)) (mcp.Result, error, bool) {
	var abandoned atomic.Bool
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopCtx := context.AfterFunc(ctx, func() {
		if !abandoned.Load() {
			cancel()
		}
	})
	stopDown := context.AfterFunc(s.down, cancel)
	type outcome struct {
		res mcp.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			stopCtx()
			stopDown()
			cancel()
		}()
		res, err := s.recovered(runCtx, tool, run)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err, false
	case <-s.abandonCtx.Done():
		abandoned.Store(true)
		select {
		case o := <-done: // finished meanwhile: its own answer wins
			return o.res, o.err, false
		default:
		}
		return toolerr.Result(restartError()), nil, true
	}
}

// Close cancels every call in flight (queued calls leave, running commands
// are killed) and kills every command group. Safe to call more than once.
func (s *Server) Close() {
	// Admission first: the shutdown ends running calls, and their slots
	// must not go to queued calls that the shutdown is about to refuse.
	s.adm.Stop()
	s.shutdown()
	s.tools.Close()
	s.jobs.close()
	if err := s.adm.Leave(); err != nil {
		s.log.Warn("admission ledger: leave", "err", err)
	}
}
