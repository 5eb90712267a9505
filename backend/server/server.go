// Package server serves mcp-backend's tools over MCP Streamable HTTP and
// stdio, with one admission controller shared by every request of the
// process, and the /healthz, /readyz and /metrics endpoints.
package server

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/overdeck/mcp-backend/backend/toolerr"
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
		adm: admission.New(admission.Limits{
			MaxActive:       cfg.Concurrency.MaxActive,
			ReservedControl: cfg.Concurrency.ReservedControl,
			MaxShell:        cfg.Concurrency.MaxShell,
			MaxQueue:        cfg.Concurrency.MaxQueue,
			QueueWait:       cfg.Concurrency.QueueWait(),
			FlowReserve:     cfg.Concurrency.FlowReserve,
			MaxFlows:        cfg.Concurrency.MaxFlows,
			FlowIdle:        time.Duration(cfg.Concurrency.FlowIdleMs) * time.Millisecond,
		}),
	}
	if cfg.Auth.BearerTokenFile != "" {
		tok, err := readToken(cfg.Auth.BearerTokenFile)
		if err != nil {
			return nil, err
		}
		s.token = tok
	}
	if cfg.Auth.OAuth != nil {
		o := oauth.Options{Config: *cfg.Auth.OAuth}
		for _, opt := range opts {
			opt(&o)
		}
		if o.Logger == nil {
			o.Logger = log
		}
		v, err := oauth.New(o)
		if err != nil {
			return nil, err
		}
		s.oauth = v
		log.Info("oauth: protected resource", "issuer", cfg.Auth.OAuth.Issuer, "resources", cfg.Auth.OAuth.Resources, "scopes", v.Scopes())
		if cfg.Auth.BearerTokenFile == "" {
			log.Warn("oauth without auth.bearerTokenFile: mcpctl has no credential to verify /mcp with")
		}
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
	s.httpLim = defaultHTTPLimits(s.maxBody(), cfg.Concurrency.MaxActive, cfg.Concurrency.MaxQueue)
	s.budget = &bodyBudget{limit: s.httpLim.BodyBudget}
	for _, r := range []struct {
		dst *[]byte
		err *toolerr.Error
	}{
		{&s.restartResult, restartError()},
	} {
		b, err := json.Marshal(toolerr.Result(r.err))
		if err != nil {
			return nil, fmt.Errorf("encode %s result: %w", r.err.Code, err)
		}
		*r.dst = b
	}
	if g, err := memguard.New(memguard.Options{}); err != nil {
		log.Info("memory guard off", "reason", err.Error())
	} else {
		s.UseMemGuard(g, 0)
		log.Info("memory guard on", "cgroup", g.Dir(), "limit", g.Last().Limit)
	}
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

// listTools shows a token only the tools its scopes let it call: a hosted
// connector puts the list before a model, which should not plan with tools
// it would be refused. A call to a hidden tool still gets 403
// insufficient_scope naming the scope (step-up).
func (s *Server) listTools(ctx context.Context, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	res, err := next(ctx, "tools/list", req)
	var who *oauth.Identity
	if extra := req.GetExtra(); extra != nil {
		who = oauth.IdentityOf(extra.TokenInfo)
	}
	list, ok := res.(*mcp.ListToolsResult)
	if err != nil || !ok || list == nil || s.oauth == nil || who == nil || who.Operator {
		return res, err
	}
	shown := *list
	shown.Tools = nil
	for _, t := range list.Tools {
		if s.oauth.MayCall(who, t.Name) {
			shown.Tools = append(shown.Tools, t)
		}
	}
	if shown.Tools == nil {
		shown.Tools = []*mcp.Tool{}
	}
	return &shown, nil
}

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

// passIdentity hands the identity guard put in the request's context to
// the SDK, which carries it to tool middleware as TokenInfo.
func passIdentity(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
	id := oauth.IdentityFrom(ctx)
	if id == nil {
		return nil, auth.ErrInvalidToken
	}
	return id.TokenInfo(), nil
}

// maxBody bounds a request: a file.write of the largest output plus
// encoding overhead fits.
func (s *Server) maxBody() int64 { return s.cfg.Limits.ResponseBytes + 1<<20 }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	active, queued := s.adm.Occupancy()
	body := map[string]any{"status": "ready", "active": active, "queued": queued, "maxQueue": s.adm.Limits().MaxQueue}
	code := http.StatusOK
	mem := s.mem.Load()
	switch {
	case s.adm.Full():
		body["status"] = "overloaded"
		code = http.StatusServiceUnavailable
	case mem.Shedding():
		body["status"] = "memory"
		code = http.StatusServiceUnavailable
	}
	if mem != nil {
		m := mem.Last()
		body["memory"] = map[string]any{"shedding": m.Shedding, "anon": m.Anon, "highWater": m.HighWater}
	}
	writeJSON(w, code, body)
}

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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
