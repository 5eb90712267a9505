package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
)

// jobsSetup is the jobs manager of a server, or why there is none.
type jobsSetup struct {
	mgr     *jobs.Manager
	off     string // why jobs are off
	tempDir string // process mode's private state, removed at Close
	dir     string // the state directory in use: a file-tool secret
}

// jobLimits turns the config into the manager's limits.
func jobLimits(j config.Jobs) jobs.Limits {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return jobs.Limits{
		MaxRunning: j.MaxRunning, MaxRunningPerPrincipal: j.MaxRunningPerPrincipal, MaxRunningPerConversation: j.MaxRunningPerConversation,
		MaxKept: j.MaxKept, KeepFor: ms(j.KeepForMs),
		OutputBytes: j.OutputBytes, TotalOutputBytes: j.TotalOutputBytes,
		DefaultTimeout: ms(j.DefaultTimeoutMs), MaxTimeout: ms(j.MaxTimeoutMs),
		MemoryMax: j.MemoryMaxBytes, TasksMax: j.TasksMax, MaxWaiters: j.MaxWaiters, MaxWaitersPerPrincipal: j.MaxWaitersPerPrincipal,
	}
}

// jobsMode decides auto: under systemd (INVOCATION_ID) with a state
// directory, systemd; under systemd without one (the canary, which must
// never touch production's jobs), off; outside systemd, process.
func jobsMode(mode string) (string, string) {
	if mode != config.JobsAuto {
		return mode, "jobs.mode is off"
	}
	if os.Getenv("INVOCATION_ID") == "" {
		return config.JobsProcess, ""
	}
	if os.Getenv("STATE_DIRECTORY") == "" {
		return config.JobsOff, "this unit has no StateDirectory (the canary serves no jobs)"
	}
	return config.JobsSystemd, ""
}

func openJobs(cfg config.Config, log *slog.Logger, onEnd func(jobs.Spec, mcpwire.JobStatus)) (jobsSetup, error) {
	var js jobsSetup
	mode, why := jobsMode(cfg.Jobs.Mode)
	if mode == config.JobsOff {
		js.off = why
		log.Info("jobs off", "reason", why)
		return js, nil
	}
	dir := cfg.Jobs.StateDir
	var runner jobs.Runner
	switch mode {
	case config.JobsSystemd:
		if dir == "" {
			sd := os.Getenv("STATE_DIRECTORY")
			if sd == "" {
				return js, fmt.Errorf("jobs.mode = systemd: set jobs.stateDir or run under a unit with StateDirectory=")
			}
			dir = filepath.Join(filepath.SplitList(sd)[0], "jobs")
		}
		exe, err := os.Executable()
		if err != nil {
			return js, fmt.Errorf("jobs: own executable: %w", err)
		}
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		runner = &jobs.SystemdRunner{
			Exe:     exe,
			Timeout: 10 * time.Second,
			Connect: func(ctx context.Context) (jobs.SystemdClient, func(), error) {
				c, err := systemd.Connect(ctx, systemd.Options{Logger: log})
				if err != nil {
					return nil, nil, err
				}
				return c, c.Close, nil
			},
		}
	default:
		if dir == "" {
			d, err := os.MkdirTemp("", "mcp-backend-jobs-")
			if err != nil {
				return js, fmt.Errorf("jobs: state directory: %w", err)
			}
			dir, js.tempDir = d, d
		}
		runner = jobs.NewProcessRunner()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := jobs.Open(ctx, jobs.Options{Dir: dir, Shell: cfg.Shell.Path, Limits: jobLimits(cfg.Jobs), Runner: runner, Logger: log, OnEnd: onEnd})
	if err != nil {
		return js, err
	}
	js.mgr, js.dir = m, dir
	log.Info("jobs on", "mode", m.Mode(), "dir", dir, "running", m.Metrics().Running)
	return js, nil
}

func (js jobsSetup) close() {
	if js.mgr != nil {
		js.mgr.Close()
	}
	if js.tempDir != "" {
		_ = os.RemoveAll(js.tempDir)
	}
}

func (js jobsSetup) drain() {
	if js.mgr != nil {
		js.mgr.Drain()
	}
}

func (js jobsSetup) metrics() *mcpwire.JobMetrics {
	if js.mgr == nil {
		return &mcpwire.JobMetrics{Mode: mcpwire.JobModeOff}
	}
	m := js.mgr.Metrics()
	return &m
}

// runWait runs a job.wait outside the admission controller: it holds no
// slot while it waits (the jobs manager bounds how many wait), and the
// shutdown answers it with the job's status through Drain, not
// UNAVAILABLE. It is audited and logged like every call.
func (s *Server) runWait(ctx context.Context, who *oauth.Identity, cw caller.Caller, call *mcp.CallToolRequest, method string, next mcp.MethodHandler) (mcp.Result, error) {
	tool := call.Params.Name
	if s.stoppingCtx.Err() != nil {
		s.refusals.add(cw, tool, string(mcpwire.CodeUnavailable))
		s.auditAdmissionRefusal(ctx, call, restartError(), nil)
		return toolerr.Result(restartError()), nil
	}
	start := time.Now()
	ca := s.auditStart(ctx, call, 0)
	res, err := s.recovered(ctx, tool, func(ctx context.Context) (mcp.Result, error) { return next(ctx, method, call) })
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && err == nil {
		res, _ = fitResult(r, s.cfg.Limits.ResponseBytes)
	}
	dur := time.Since(start)
	ca.end(res, err, false, dur)
	outcomeOf := "jsonrpc-error"
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && err == nil {
		outcomeOf = outcome(r)
	}
	s.logCall(who, cw, tool, admission.Normal, 0, dur, outcomeOf)
	return res, err
}
