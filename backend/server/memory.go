package server

import (
	"time"

	"github.com/overdeck/mcp-backend/backend/memguard"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

func memoryError() *toolerr.Error {
	return toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: memory use is above its high-water mark; retry later")
}

// UseMemGuard replaces the memory guard (New installs one reading the
// process's own cgroup when there is one) and samples it every interval
// (memguard.DefaultInterval when zero) until Close.
func (s *Server) UseMemGuard(g *memguard.Guard, interval time.Duration) {
	s.mem.Store(g)
	go g.Run(s.down, interval)
}

// openMemGuard installs the guard of the process's own cgroup, when there
// is one to read.
func (s *Server) openMemGuard() {
	g, err := memguard.New(memguard.Options{})
	if err != nil {
		s.log.Info("memory guard off", "reason", err.Error())
		return
	}
	s.UseMemGuard(g, 0)
	s.log.Info("memory guard on", "cgroup", g.Dir(), "limit", g.Last().Limit)
}

// SetHTTPLimits replaces the HTTP limits; call it before Handler or Serve.
func (s *Server) SetHTTPLimits(l HTTPLimits) {
	s.httpLim = l
	s.budget = &bodyBudget{limit: l.BodyBudget}
}

// HTTPLimits are the limits in force.
func (s *Server) HTTPLimits() HTTPLimits { return s.httpLim }

// intakeJSON is what /metrics adds about the HTTP intake.
type intakeJSON struct {
	BodyBudget       int64 `json:"bodyBudget"`
	BodyBytesHeld    int64 `json:"bodyBytesHeld"`
	BodyBytesPeak    int64 `json:"bodyBytesPeak"`
	BodyRefused      int64 `json:"bodyRefused"`
	BodyTimedOut     int64 `json:"bodyTimedOut"`
	MaxConns         int   `json:"maxConns"`
	ReserveConns     int   `json:"reserveConns"`
	ConnsOpen        int   `json:"connsOpen"`
	ReserveConnsOpen int   `json:"reserveConnsOpen"`
	// ConnsCulled: connections accepted while half the cap was taken that
	// sent no whole request header in time, closed to free their place.
	ConnsCulled int64 `json:"connsCulled"`
}

// metricsJSON is the pinned admission snapshot with our fields beside it.
type metricsJSON struct {
	mcpwire.Metrics
	Memory  memguard.Sample        `json:"memory"`
	Intake  intakeJSON             `json:"intake"`
	Audit   mcpwire.AuditMetrics   `json:"audit"`
	Policy  mcpwire.PolicyMetrics  `json:"policy"`
	Sandbox mcpwire.SandboxMetrics `json:"sandbox"`
}

func (s *Server) metricsSnapshot() metricsJSON {
	in := intakeJSON{
		BodyBudget:    s.budget.limit,
		BodyBytesHeld: s.budget.used.Load(),
		BodyBytesPeak: s.budget.peak.Load(),
		BodyRefused:   s.budget.refused.Load(),
		BodyTimedOut:  s.budget.timeout.Load(),
		MaxConns:      s.httpLim.MaxConns,
		ReserveConns:  s.httpLim.ReserveConns,
	}
	if l := s.conns.Load(); l != nil {
		in.ConnsOpen, in.ReserveConnsOpen = l.open()
		in.ConnsCulled = l.culled.Load()
	}
	m := s.adm.Snapshot()
	m.Jobs = s.jobs.metrics()
	return metricsJSON{Metrics: m, Memory: s.mem.Load().Last(), Intake: in, Audit: s.auditMetrics(), Policy: s.policy.metrics(), Sandbox: s.sandboxes.metrics()}
}
