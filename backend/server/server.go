// Package server serves mcp-backend's tools over MCP Streamable HTTP and
// stdio, with one admission controller shared by every request of the
// process, and the /healthz, /readyz and /metrics endpoints.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
	"github.com/overdeck/mcp-backend/mcpwire"
)

// reqIDHeader carries, from our HTTP layer to the tool middleware, the key
// of the HTTP request's context. The SDK does not cancel a tool handler's
// context when a stateless HTTP client goes away, so we wire it ourselves.
// Any value a client sends is overwritten.
const reqIDHeader = "X-Mcp-Backend-Request"

// toolHeader carries the tool name the intake decided on (scope, early
// refusal, flow) to the middleware, which refuses a call the SDK dispatched
// under another name. Any value a client sends is overwritten.
const toolHeader = "X-Mcp-Backend-Tool"

// notACall is toolHeader's value for a message the intake did not read as
// a tools/call (no tool is named so).
const notACall = "(not tools/call)"

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

	requests sync.Map // reqIDHeader value -> context.Context of the HTTP request
	// disagreed counts calls the SDK dispatched under another tool name
	// than the intake read: none, while the frame check holds.
	disagreed atomic.Int64
	cancels   *cancelScope  // links HTTP cancel notifications to their calls
	refusals  *refusalLog   // calls that never ran, logged in aggregate
	nextReq   atomic.Uint64 // request ids; the header is ours, so a counter suffices
	audit     *auditState   // the audit trail (audit.go)
	policy    *policyState  // allow/ask/deny before a call runs (policy.go)
	ask       *asker        // signs and spends the user's answers to asks (elicit.go)
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

// admit is the MCP middleware every tools/call passes through, whatever the
// transport: it classifies the tool, waits for a slot in the one shared
// controller, runs the tool under the HTTP request's cancellation, keeps the
// result within the response budget and logs one line.
func (s *Server) admit(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/list" {
			return s.listTools(ctx, req, next)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil {
			res, err := next(ctx, method, req)
			return res, boundError(err)
		}
		var who *oauth.Identity
		if call.Extra != nil {
			who = oauth.IdentityOf(call.Extra.TokenInfo)
		}
		if !knownTool(call.Params.Name) {
			// stdio's way here (HTTP's intake refused it already): before
			// admission and the audit's call records.
			s.refusals.add(s.callerOf(who, call), unknownToolLabel, unknownToolOutcome)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: unknownTool(call.Params.Name)}
		}
		ctx, cancel := s.requestContext(ctx, call)
		defer cancel()
		cw := s.callerOf(who, call)
		ctx = caller.With(ctx, cw)
		ctx = tools.WithArrival(ctx, time.Now())
		tool := call.Params.Name
		kind := admission.KindOf(tool)
		if te := s.mayRun(who, call); te != nil {
			s.refusals.add(cw, tool, string(te.Code))
			s.auditAdmissionRefusal(ctx, call, te, nil)
			return toolerr.Result(te), nil
		}
		// The one decode of the arguments: what the tool would refuse is
		// refused before the policy judges it, and the policy, the
		// approvals, the audit and the tool all read the same canonical
		// bytes.
		args, te := s.tools.Args(tool, call.Params.Arguments)
		if te != nil {
			s.refusals.add(cw, tool, string(te.Code))
			s.auditAdmissionRefusal(ctx, call, te, nil)
			return toolerr.Result(te), nil
		}
		call = withArguments(call, args)
		req = call
		// The policy, after who may call what and before anything queues
		// or runs: a refusal or an ask never takes a slot.
		ctx, refused, approved := s.enforce(ctx, who, cw, call)
		if refused != nil {
			return refused, nil
		}
		ctx = s.sandboxes.choose(ctx, tool)
		var post func(mcp.Result) mcp.Result
		if approved != nil {
			if approved.req != nil {
				req = approved.req
			}
			post = approved.post
		}
		if mcpwire.ClassOf(tool) == mcpwire.ClassWait {
			return s.runWait(ctx, who, cw, call, method, next)
		}
		if s.stoppingCtx.Err() != nil {
			s.refusals.add(cw, tool, string(mcpwire.CodeUnavailable))
			s.auditAdmissionRefusal(ctx, call, restartError(), nil)
			return toolerr.Result(restartError()), nil
		}
		if kind != admission.Control && s.mem.Load().Shedding() {
			s.refusals.add(cw, tool, string(mcpwire.CodeOverloaded))
			s.auditAdmissionRefusal(ctx, call, memoryError(), nil)
			return toolerr.Result(s.serverOverloaded(memoryError(), kind)), nil
		}
		if te := s.auditRefusal(); te != nil && kind != admission.Control {
			s.refusals.add(cw, tool, string(te.Code))
			s.auditAdmissionRefusal(ctx, call, te, nil)
			return toolerr.Result(te), nil
		}
		start := time.Now()
		// Shutdown takes queued calls out of the queue at once.
		acqCtx, stopAcq := context.WithCancel(ctx)
		defer stopAcq()
		defer context.AfterFunc(s.stoppingCtx, stopAcq)()
		permit, err := s.adm.AcquireFlow(acqCtx, kind, flowOf(cw))
		wait := time.Since(start)
		if err != nil {
			te := admissionError(err, s.adm.Limits())
			if s.stoppingCtx.Err() != nil && ctx.Err() == nil {
				te = restartError()
			}
			s.refusals.add(cw, tool, string(te.Code))
			s.auditAdmissionRefusal(ctx, call, te, err)
			return toolerr.Result(te), nil
		}
		s.sandboxes.count(ctx)
		ca := s.auditStart(ctx, call, wait)
		res, err, abandoned := s.runCall(ctx, func(ctx context.Context) (mcp.Result, error) {
			// The slot covers trimming the result too, so that work is
			// bounded like the rest, and a panic cannot strand it.
			defer permit.Release()
			res, err := next(ctx, method, req)
			if post != nil && err == nil {
				res = post(res)
			}
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && err == nil {
				fitted, truncated := fitResult(r, s.cfg.Limits.ResponseBytes)
				if truncated {
					s.log.Warn("result truncated to the response budget", "tool", tool, "budget", s.cfg.Limits.ResponseBytes)
				}
				return fitted, nil
			}
			return res, err
		})
		dur := time.Since(start) - wait
		ca.end(res, err, abandoned, dur)
		switch {
		case abandoned:
			s.logCall(who, cw, tool, kind, wait, dur, "abandoned-at-shutdown")
		case err != nil:
			s.logCall(who, cw, tool, kind, wait, dur, "jsonrpc-error")
		default:
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil {
				s.logCall(who, cw, tool, kind, wait, dur, outcome(r))
			} else {
				s.logCall(who, cw, tool, kind, wait, dur, "ok")
			}
		}
		return res, err
	}
}

// withArguments is call with other arguments (a copy: the SDK's request
// is left as it came).
func withArguments(call *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolRequest {
	nc := *call
	np := *call.Params
	np.Arguments = args
	nc.Params = &np
	return &nc
}

// mayRun enforces, where the tool actually runs and with the name the SDK
// dispatched, what the intake decided from its own reading: the same tool,
// and one the token's scopes grant. Neither can fail while the intake and
// the SDK read messages alike; if they ever do not, no tool runs that the
// caller may not call.
func (s *Server) mayRun(who *oauth.Identity, call *mcp.CallToolRequest) *toolerr.Error {
	tool := call.Params.Name
	if call.Extra != nil && call.Extra.Header != nil {
		if seen, ok := call.Extra.Header[toolHeader]; ok && (len(seen) != 1 || seen[0] != tool) {
			s.disagreed.Add(1)
			s.log.Error("intake and dispatch disagree on the tool; refused", "intake", seen, "dispatched", tool)
			return toolerr.New(mcpwire.CodeInvalidArgument, "the request's tool name is ambiguous; refused")
		}
	}
	if s.oauth != nil && who != nil && !s.oauth.MayCall(who, tool) {
		return toolerr.New(mcpwire.CodePermissionDenied, "tool %s is not granted by the token's scopes", tool)
	}
	return nil
}

// callerOf resolves who a call acts for from what the SDK dispatched: the
// verified identity, the call's _meta and its session header. HTTP and
// stdio take the same path.
func (s *Server) callerOf(who *oauth.Identity, call *mcp.CallToolRequest) caller.Caller {
	var subject, session, sid string
	if m := call.Params.Meta; m != nil {
		subject, _ = m[caller.MetaSubject].(string)
		session, _ = m[caller.MetaSession].(string)
	}
	if call.Extra != nil && call.Extra.Header != nil {
		sid = call.Extra.Header.Get(sessionHeader)
	}
	return s.resolveCaller(who, subject, session, sid)
}

// resolveCaller is the one resolution the intake (from its reading of the
// body) and the middleware (from the SDK's) both use.
func (s *Server) resolveCaller(who *oauth.Identity, metaSubject, metaSession, sessionID string) caller.Caller {
	c := caller.Claims{Authenticated: s.token != nil || s.oauth != nil, MetaSubject: metaSubject, MetaSession: metaSession, SessionID: sessionID}
	if who != nil {
		c.Operator = who.Operator
		if !who.Operator {
			c.Subject, c.ClientID = who.Subject, who.ClientID
			if s.cfg.Auth.OAuth != nil {
				c.Issuer = s.cfg.Auth.OAuth.Issuer
			}
		}
	}
	return s.ids.Resolve(c)
}

// flowOf is a caller's flow in admission: its pseudonyms, never its ids.
func flowOf(c caller.Caller) admission.Flow {
	return admission.Flow{Principal: string(c.Principal.Kind) + ":" + c.PrincipalHash, Conversation: c.Conversation}
}

// requestContext joins the tool call's context with its HTTP request's, so
// a client that goes away cancels a queued or running call.
func (s *Server) requestContext(ctx context.Context, call *mcp.CallToolRequest) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	// Shutdown cancels every call: queued ones leave, running commands die.
	stopDown := context.AfterFunc(s.down, cancel)
	if call.Extra == nil || call.Extra.Header == nil {
		return ctx, func() { stopDown(); cancel() }
	}
	v, ok := s.requests.Load(call.Extra.Header.Get(reqIDHeader))
	if !ok {
		return ctx, func() { stopDown(); cancel() }
	}
	stop := context.AfterFunc(v.(context.Context), cancel)
	return ctx, func() { stop(); stopDown(); cancel() }
}

func admissionError(err error, lim admission.Limits) *toolerr.Error {
	var r *admission.Refusal
	if errors.As(err, &r) {
		var te *toolerr.Error
		switch {
		case errors.Is(err, admission.ErrQueueTimeout):
			te = toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: no slot within the queue wait of %s; retry later", lim.QueueWait)
		case r.Scope == admission.ScopeConversation:
			te = toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: this conversation holds the most of the admission queue (%d places); retry later", lim.MaxQueue)
		case r.Scope == admission.ScopePrincipal:
			te = toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: this caller holds the most of the admission queue (%d places); retry later", lim.MaxQueue)
		default:
			te = toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: admission queue is full (%d queued); retry later", lim.MaxQueue)
		}
		if errors.Is(err, admission.ErrDisplaced) {
			te.Message = "backend overloaded: this call's queue place went to a caller holding fewer; retry later"
		}
		te.Scope, te.RetryAfterMs = string(r.Scope), max(r.RetryAfter.Milliseconds(), 1)
		return te
	}
	switch {
	case errors.Is(err, admission.ErrQueueFull), errors.Is(err, admission.ErrQueueTimeout):
		return toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: admission queue is full (%d queued); retry later", lim.MaxQueue)
	case errors.Is(err, admission.ErrCancelled):
		return toolerr.New(mcpwire.CodeCancelled, "request cancelled by the client while queued")
	case errors.Is(err, admission.ErrStopped):
		return restartError()
	}
	return toolerr.New(mcpwire.CodeInternal, "admission: %v", err)
}

// serverOverloaded marks an OVERLOADED error that is no flow's doing (the
// memory guard, the body budget, the connection cap): scope server, and a
// retry hint from how fast admission drains.
func (s *Server) serverOverloaded(te *toolerr.Error, kind admission.Kind) *toolerr.Error {
	te.Scope = mcpwire.ScopeServer
	te.RetryAfterMs = max(s.adm.RetryAfter(kind).Milliseconds(), 1)
	return te
}

// encodeResult encodes a tool result for writeToolResult.
func encodeResult(te *toolerr.Error) []byte {
	b, _ := json.Marshal(toolerr.Result(te)) // strings and numbers only
	return b
}

func outcome(r *mcp.CallToolResult) string {
	if !r.IsError {
		return "ok"
	}
	if e := toolerr.FromResult(r); e != nil {
		return string(e.Code)
	}
	return "error"
}

// logCall writes one line per tool call that ran: never arguments,
// contents, output or environment values, nor a token; who called (the
// principal and conversation as hashes; subject and client when OAuth is
// on). Calls that never ran are aggregated by refusals instead.
func (s *Server) logCall(who *oauth.Identity, cw caller.Caller, tool string, kind admission.Kind, wait, dur time.Duration, result string) {
	attrs := []any{"tool", tool, "class", kind.String(),
		"queueWaitMs", wait.Milliseconds(), "durationMs", dur.Milliseconds(),
		"outcome", result, "principal", string(cw.Principal.Kind) + ":" + cw.PrincipalHash, "conversation", cw.Conversation}
	if who != nil {
		attrs = append(attrs, "subject", who.Subject, "clientId", who.ClientID)
	}
	level := slog.LevelInfo
	if s.audit != nil && s.audit.sink == config.AuditJournal {
		// The journal holds the call's audit records already; a log line
		// each as well would double journald's work per call.
		level = slog.LevelDebug
	}
	s.log.Log(context.Background(), level, "tool call", attrs...)
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
	mux.Handle("POST /mcp", rpcErrors(s.guard(s.trackRequest(mcpHandler))))
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

// trackRequest checks the body is a JSON-RPC message (a malformed one gets
// a JSON-RPC error, not plain text) and registers the request's context
// under a fresh id that the tool middleware finds in the forwarded headers.
func (s *Server) trackRequest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserve := onReserveConn(r)
		limit := s.maxBody()
		if reserve {
			limit = smallBody
		}
		body, release, err := s.readBody(w, r, limit)
		defer release()
		if err != nil {
			if errors.Is(err, errBodyTimeout) {
				s.budget.timeout.Add(1)
			}
			s.refuseBody(w, r, body, limit, err)
			return
		}
		msg, code, why := parseJSONRPC(body)
		if code != 0 {
			writeRPCErrorID(w, http.StatusBadRequest, msg.ID, code, why)
			return
		}
		r.Header.Set(toolHeader, notACall)
		if msg.Method == "tools/call" && !knownTool(msg.Params.Name) {
			// Before scopes, admission and the audit's call records: the
			// name is the client's, of any length.
			s.refuseUnknownTool(w, r, msg)
			return
		}
		if msg.Method == "tools/call" {
			if !s.mayCall(w, r, msg.Params.Name) {
				return
			}
			r.Header.Set(toolHeader, msg.Params.Name)
		}
		if msg.Method == "tools/call" && msg.ID != nil {
			kind := admission.KindOf(msg.Params.Name)
			cw := s.resolveCaller(oauth.IdentityFrom(r.Context()), msg.metaString(caller.MetaSubject), msg.metaString(caller.MetaSession), r.Header.Get(sessionHeader))
			var shed []byte
			code := mcpwire.CodeOverloaded
			switch {
			case s.stoppingCtx.Err() != nil:
				shed, code = s.restartResult, mcpwire.CodeUnavailable
			case reserve && kind != admission.Control:
				// Past the connection cap only control work is served.
				shed = encodeResult(s.serverOverloaded(toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: every connection is in use; retry later"), kind))
			case kind != admission.Control && s.mem.Load().Shedding():
				shed = encodeResult(s.serverOverloaded(memoryError(), kind))
			case mcpwire.ClassOf(msg.Params.Name) == mcpwire.ClassWait:
				// A wait holds no slot: the jobs manager bounds it.
			default:
				// The early refusal decides with the caller's flow, as
				// admission would: a polite caller is not shed for a
				// greedy one's queue.
				if ref := s.adm.ShedFlow(kind, flowOf(cw)); ref != nil {
					shed = encodeResult(admissionError(ref, s.adm.Limits()))
				}
			}
			if shed != nil {
				s.refusals.add(cw, msg.Params.Name, string(code))
				s.auditShed(r, &cw, msg.Params.Name, shed)
				s.writeToolResult(w, msg.ID, shed)
				return
			}
		}
		// The SDK reads its own copy; ours is let go of as soon as it has.
		r.Body = &dropReader{b: body}
		r.ContentLength = int64(len(body))
		owner := ""
		if id := oauth.IdentityFrom(r.Context()); id != nil {
			owner = id.Subject + " " + id.ClientID
		}
		ctx, forget := s.cancels.begin(w, r, msg, owner)
		defer forget()
		id := strconv.FormatUint(s.nextReq.Add(1), 36)
		s.requests.Store(id, ctx)
		defer s.requests.Delete(id)
		r.Header.Set(reqIDHeader, id)
		r.Header.Set(hostHeader, r.Host)
		h.ServeHTTP(w, r)
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

// maxIDBytes bounds a request id, which every answer echoes.
const maxIDBytes = 256

// rpcMessage is what the HTTP layer needs of a JSON-RPC message.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		Name      string                     `json:"name"`
		RequestID json.RawMessage            `json:"requestId"` // of notifications/cancelled
		Meta      map[string]json.RawMessage `json:"_meta"`     // exact keys, as the SDK reads them
	} `json:"params"`
}

// metaString is a string value of the message's params._meta, "" when the
// key is absent or not a string (the SDK's reading too).
func (m *rpcMessage) metaString(key string) string {
	var v string
	if raw, ok := m.Params.Meta[key]; !ok || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// parseJSONRPC returns the message, or a JSON-RPC error code and message
// for a body that is not a JSON-RPC message. A batch (older protocol
// versions) is passed on to the SDK as it is.
func parseJSONRPC(body []byte) (rpcMessage, int, string) {
	var m rpcMessage
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		// Each answer of a batch would be trimmed to the budget on its
		// own, not the whole; MCP dropped batching in 2025-06-18.
		return m, -32600, "invalid request: JSON-RPC batches are not supported; send one message per request"
	}
	if err := json.Unmarshal(body, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return m, -32700, "parse error: the body is not valid JSON"
		}
		return m, -32600, "invalid request: " + err.Error()
	}
	if err := checkFrame(body); err != nil {
		// The intake and the SDK must read the same call from these bytes.
		return rpcMessage{}, -32600, "invalid request: " + err.Error()
	}
	if m.JSONRPC != "2.0" {
		return m, -32600, `invalid request: want a JSON-RPC 2.0 object with "jsonrpc":"2.0"`
	}
	if len(m.ID) > maxIDBytes {
		// The id is echoed in the answer, outside the result's budget.
		return rpcMessage{}, -32600, fmt.Sprintf("invalid request: id longer than %d bytes", maxIDBytes)
	}
	if why := validID(m.ID); why != "" {
		// Answering under another id than the one sent would be worse
		// than refusing: the client could match it to another call.
		return rpcMessage{}, -32600, "invalid request: " + why
	}
	return m, 0, ""
}

// writeToolResult answers a tools/call at once with an encoded tool result
// (a shed or a restart), without the cost of a server session.
func (s *Server) writeToolResult(w http.ResponseWriter, id json.RawMessage, result []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	buf.Grow(len(result) + len(id) + 40)
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(id)
	buf.WriteString(`,"result":`)
	buf.Write(result)
	buf.WriteString("}\n")
	_, _ = w.Write(buf.Bytes())
}

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
