// Package server serves mcp-backend's tools over MCP Streamable HTTP and
// stdio, with one admission controller shared by every request of the
// process, and the /healthz, /readyz and /metrics endpoints.
//
// Its files by concern:
//   - wiring: server.go (New builds the parts, Handler routes to them)
//   - listener and slot lifecycle: run.go, gate.go, connlimit.go,
//     drain.go, service.go, preflight.go
//   - the call pipeline: call.go (the steps in order), access.go,
//     intake.go, message.go, frame.go, rpcerror.go, names.go, stdio.go,
//     sessions.go, budget.go, memory.go, refusals.go, jobs.go, sandbox.go,
//     filepolicy.go
//   - the approval and elicitation exchange: policy.go (allow, ask or
//     deny), elicit.go (asking the user in the call), approvals.go (asking
//     the operator)
//   - the audit trail: audit.go; logs: logging.go
//   - exposition: metrics.go (/metrics), prom.go (its Prometheus text),
//     probes.go (/healthz, /readyz)
//
// What a tool is (class, scope, policy target, sandbox, audit shape) is
// read from backend/tooldesc, never decided here by name.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/memguard"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/tools"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

// Server is one serving process: one admission controller, one tool set.
type Server struct {
	cfg        config.Config
	log        *slog.Logger
	adm        *admission.Controller
	tools      *tools.Tools
	jobs       jobsSetup
	mcp        *mcp.Server
	token      []byte          // bearer token; nil when auth is off
	oauth      *oauth.Verifier // nil when OAuth is off
	startOAuth sync.Once       // key loading starts with the first Handler

	restartResult []byte // the encoded UNAVAILABLE result of a call cut by a restart

	httpLim HTTPLimits
	budget  *bodyBudget
	mem     atomic.Pointer[memguard.Guard]
	conns   atomic.Pointer[capListener]

	down     context.Context // done once Close ran
	shutdown context.CancelFunc

	stoppingCtx context.Context // done once shutdown began: queued and new calls get UNAVAILABLE
	stopping    context.CancelFunc
	abandonCtx  context.Context // done at the drain deadline: running calls get UNAVAILABLE
	abandon     context.CancelFunc

	// disagreed counts calls the SDK dispatched under another tool name
	// than the intake read: none, while the frame check holds.
	disagreed atomic.Int64
	cancels   *cancelScope // links HTTP cancel notifications to their calls
	refusals  *refusalLog  // calls that never ran, logged in aggregate
	audit     *auditState  // the audit trail (audit.go)
	policy    *policyState // allow/ask/deny before a call runs (policy.go)
	ask       *asker       // signs and spends the user's answers to asks (elicit.go)
	approvals *approvalState
	sandboxes *sandboxState       // the profiles shell commands run in (sandbox.go)
	ids       *caller.Keys        // the pseudonyms callers are shown by
	unitNames policy.UnitResolver // what systemd resolves a unit name to (policy units rules)
}

// Option adjusts a Server at construction.
type Option func(*oauth.Options)

// WithOAuthOptions sets the OAuth verifier's options besides its config
// (clock, refresh intervals, HTTP client).
func WithOAuthOptions(o oauth.Options) Option {
	return func(dst *oauth.Options) { cfg := dst.Config; *dst = o; dst.Config = cfg }
}

// New builds a server for a validated config. It reads the bearer token
// file when one is configured.
func New(cfg config.Config, log *slog.Logger, opts ...Option) (_ *Server, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	down, shutdown := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		log:      log,
		down:     down,
		shutdown: shutdown,
		adm:      admission.New(admissionLimits(cfg.Concurrency)),
	}
	if s.token, s.oauth, err = openAccess(cfg.Auth, log, opts); err != nil {
		return nil, err
	}
	ids, err := openKeys(osGetenv, log)
	if err != nil {
		return nil, err
	}
	s.ids = ids
	a, err := openAudit(cfg.Audit, log)
	if err != nil {
		return nil, err
	}
	s.audit = a
	defer func() {
		if err != nil {
			// Nothing will serve or close it: its goroutines and file go.
			_ = a.log.Close(time.Second)
		}
	}()
	pol, err := policy.New(cfg.Policy)
	if err != nil {
		return nil, err
	}
	s.policy = &policyState{p: pol}
	s.unitNames = systemdUnitNames(log)
	s.ask = newAsker()
	if s.approvals, err = openApprovals(cfg, pol != nil); err != nil {
		return nil, err
	}
	// Wherever it is, the file tools refuse it (filePolicy below).
	cfg.Policy.Approvals.Dir = s.approvals.store.Dir()
	js, err := openJobs(cfg, log, s.auditJobEnd)
	if err != nil {
		return nil, err
	}
	s.jobs = js
	if s.sandboxes, err = openSandboxes(cfg, fileOptions(cfg, osGetenv, js.dir), log); err != nil {
		js.close()
		return nil, err
	}
	s.tools = tools.New(tools.Options{
		SandboxExe:     s.sandboxes.exe,
		Jobs:           js.mgr,
		JobsOffReason:  js.off,
		JobLimits:      jobLimits(cfg.Jobs),
		OutputBytes:    cfg.Limits.OutputBytes,
		ResponseBytes:  cfg.Limits.ResponseBytes,
		ShellPath:      cfg.Shell.Path,
		DefaultTimeout: time.Duration(cfg.Shell.DefaultTimeoutMs) * time.Millisecond,
		MaxTimeout:     time.Duration(cfg.Shell.MaxTimeoutMs) * time.Millisecond,
		Logger:         log,
		Admission:      func() any { return s.adm.Snapshot() },
		Files:          filePolicy(cfg, osGetenv, js.dir),
	})
	s.stoppingCtx, s.stopping = context.WithCancel(context.Background())
	s.abandonCtx, s.abandon = context.WithCancel(context.Background())
	s.SetHTTPLimits(defaultHTTPLimits(s.maxBody(), cfg.Concurrency.MaxActive, cfg.Concurrency.MaxQueue))
	s.restartResult = encodeResult(restartError())
	s.openMemGuard()
	s.shareLimits(osGetenv("RUNTIME_DIRECTORY"))
	s.refusals = newRefusalLog(log)
	go s.refusals.run(s.down)
	s.cancels = newCancelScope(2*(cfg.Concurrency.MaxActive+cfg.Concurrency.MaxQueue) + 64)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "mcp-backend", Version: buildinfo.Version}, &mcp.ServerOptions{Logger: sdkLogger(log)})
	s.tools.Register(s.mcp)
	s.mcp.AddReceivingMiddleware(s.admit)
	return s, nil
}

// Admission is the process's controller (for tests and system.info).
func (s *Server) Admission() *admission.Controller { return s.adm }

// Handler returns the HTTP handler: /mcp, /healthz, /readyz, /metrics.
func (s *Server) Handler() http.Handler {
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       sdkLogger(s.log),
		// allowedHosts decides (checkHost); the SDK's own rebinding check
		// would refuse the tunnels' public Host names.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        s.maxBody(),
	})
	var mcpHandler http.Handler = streamable
	if s.token != nil || s.oauth != nil {
		// The SDK hands a request's TokenInfo to tool middleware only
		// when this middleware put it there; guard has already decided.
		mcpHandler = auth.RequireBearerToken(passIdentity, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(streamable)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /mcp", rpcErrors(s.guard(s.serveMCP(mcpHandler))))
	mux.Handle("/mcp", rpcErrors(s.guard(mcpHandler))) // GET/DELETE: the SDK answers 405
	if s.oauth != nil {
		s.startOAuth.Do(func() { go s.oauth.Run(s.down) })
		for _, p := range s.oauth.MetadataPaths() {
			mux.Handle(p, s.oauth.MetadataHandler())
		}
	}
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	// /metrics holds counters and pseudonyms: from loopback (Prometheus,
	// probes, stress) it needs no secret; through a tunnel (an
	// allowedHosts name) it needs the operator's token.
	mux.Handle("GET /metrics", s.hostGuard(s.metricsGuard(http.HandlerFunc(s.metrics))))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requestStarted(r) {
			// A reserve connection, or any while crowded, answers once
			// and frees its place.
			w.Header().Set("Connection", "close")
		}
		if s.httpLim.WriteTimeout > 0 {
			w = &deadlineWriter{ResponseWriter: w, d: s.httpLim.WriteTimeout}
		}
		mux.ServeHTTP(w, r)
	})
}
