package server

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/config"
)

// ShareInterval is how often a process sharing the service's limits looks
// at the ledger: how soon it takes up another process's arrival or exit,
// reclaims the share of one that died, and hands capacity another freed to
// its own waiters.
const ShareInterval = 10 * time.Millisecond

// admissionLimits are the controller's limits as the config sets them.
func admissionLimits(c config.Concurrency) admission.Limits {
	return admission.Limits{
		MaxActive:       c.MaxActive,
		ReservedControl: c.ReservedControl,
		MaxShell:        c.MaxShell,
		MaxQueue:        c.MaxQueue,
		QueueWait:       c.QueueWait(),
		FlowReserve:     c.FlowReserve,
		MaxFlows:        c.MaxFlows,
		FlowIdle:        time.Duration(c.FlowIdleMs) * time.Millisecond,
	}
}

// shareLimits makes the admission limits (and the memory guard) the
// service's rather than the process's when the process runs with a runtime
// directory (systemd's RuntimeDirectory=, which both production slots
// name): every process serving the socket then holds one set of limits
// through the ledger there. Without one (development, tests, the canary)
// the limits are the process's, as they always were; so they are too,
// with a warning, if the ledger cannot be had.
func (s *Server) shareLimits(runtimeDir string) {
	dir, _, _ := strings.Cut(runtimeDir, ":")
	if dir == "" || !filepath.IsAbs(dir) {
		return
	}
	l, err := admission.OpenLedger(dir)
	if err != nil {
		s.log.Warn("limits held by this process alone", "reason", err.Error())
		return
	}
	s.log.Info("limits held with every process serving the socket", "ledger", l.Path())
	s.adm.Share(s.down, l, ShareInterval, s.log)
	if g := s.mem.Load(); g != nil {
		g.MeasureService(s.adm.Shared)
	}
}
