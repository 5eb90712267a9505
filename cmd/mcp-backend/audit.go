package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// auditProcess writes the process's start record (version, executable and
// config digests) and returns what writes its stop record and flushes the
// log; l nil (audit off) does nothing.
func auditProcess(l *audit.Log, configPath, transport string) func(error) {
	if l == nil {
		return func(error) {}
	}
	cfgDigest, _ := buildinfo.FileDigest(configPath)
	common := func(r *audit.Record) {
		r.Add(audit.FieldVersion, buildinfo.Version)
		r.Add(audit.FieldDigest, buildinfo.ExecutableDigest())
		r.Add(audit.FieldConfigDigest, cfgDigest)
		r.Add(audit.FieldPID, strconv.Itoa(os.Getpid()))
		r.Add(audit.FieldRole, os.Getenv(audit.RoleEnv))
		r.Add(audit.FieldTransport, transport)
	}
	start := audit.Record{Event: audit.EventProcessStart, Message: fmt.Sprintf("mcp-backend %s started (%s)", buildinfo.Version, transport)}
	common(&start)
	l.Emit(start)
	return func(err error) {
		stop := audit.Record{Event: audit.EventProcessStop, Message: fmt.Sprintf("mcp-backend %s stopped", buildinfo.Version)}
		common(&stop)
		if err != nil {
			stop.Add(audit.FieldReason, audit.Bound(err.Error(), audit.ValueBytes))
		}
		l.Emit(stop)
		// A stopped journal must not hold up the exit past TimeoutStopSec.
		_ = l.Close(time.Second)
	}
}
