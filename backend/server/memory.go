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
