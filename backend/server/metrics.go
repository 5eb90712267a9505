package server

import (
	"net/http"

	"github.com/overdeck/mcp-backend/backend/memguard"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// /metrics: one snapshot of every part's counters, as JSON (the default)
// or as Prometheus text (prom.go).

// metrics serves /metrics: Prometheus text when asked for, JSON otherwise.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	snap := s.metricsSnapshot()
	if wantsText(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		writePrometheus(w, snap)
		writeSessionsPrometheus(w, s.cancels.stats())
		return
	}
	writeJSON(w, http.StatusOK, metricsWithSessions{snap, s.cancels.stats()})
}

// metricsWithSessions is /metrics: the snapshot with the cancellation
// scope's state beside it.
type metricsWithSessions struct {
	metricsJSON
	Sessions SessionStats `json:"sessions"`
}

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
