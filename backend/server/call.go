package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/backend/tools"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// One tools/call, step by step. Each step is one function in this file (or
// the one it names), run once per call. Over HTTP the intake (serveMCP)
// runs the steps that must answer before the SDK reads the body and hands
// what it established to the tool middleware (admit) in the request's
// context; over stdio there is no intake and admit runs them itself.
//
//	HTTP                          stdio
//	 1 guard     Host, auth, reserve connections (guard, access.go)
//	 2 read      size, time, body budget (readBody, intake.go)
//	                               the line filter (stdio.go)
//	 3 parse     one JSON-RPC message, its frame and id: parseJSONRPC, both
//	 4 caller    who the call acts for: resolveCaller, both
//	 5 tool      one of ours: knownTool, both
//	 6 scope     the token's scopes grant it: 403 (mayCall) | no token on stdio
//	 7 shed      refused early when it could not be admitted: shedEarly
//	   -- the SDK decodes the message and dispatches it to admit --
//	 8 agree     the SDK dispatched the tool the intake checked: sameTool
//	 9 arguments the one strict decode: tools.Args
//	10 policy    allow, ask or deny, and the sandbox profile (enforce,
//	             policy.go; sandboxes.choose, sandbox.go)
//	11 admission a slot in the shared controller: admitted
//	12 run       bounded, under the request's cancellation and the drain
//	             (runCall, drain.go; a panic is recovered there)
//	13 audit     start and end records, one log line (auditStart, logCall)

// intake is what the HTTP intake established about one request, carried to
// admit in the request's context (the SDK hands its handlers the HTTP
// request's context values, not its cancellation): nothing crosses in
// headers.
type intake struct {
	// cancel ends with the request: the client went away, or cancelled
	// the call with notifications/cancelled.
	cancel context.Context
	host   string
	tool   string        // the tools/call's name as the intake read it; "" for another method
	caller caller.Caller // resolved for a tools/call
	// shed reports that shedEarly let the call through: admit need not ask
	// again unless time passed (an ask of the user).
	shed bool
}

type intakeKey struct{}

func withIntake(ctx context.Context, in *intake) context.Context {
	return context.WithValue(ctx, intakeKey{}, in)
}

// intakeOf is the HTTP intake's record of the call's request; nil over
// stdio.
func intakeOf(ctx context.Context) *intake {
	in, _ := ctx.Value(intakeKey{}).(*intake)
	return in
}

// serveMCP is the HTTP intake of POST /mcp, after guard (step 1): steps 2
// to 7, then the SDK.
func (s *Server) serveMCP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 2 read
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
		// 3 parse
		msg, code, why := parseJSONRPC(body)
		if code != 0 {
			writeRPCErrorID(w, http.StatusBadRequest, msg.ID, code, why)
			return
		}
		in := &intake{host: r.Host}
		if msg.Method == "tools/call" {
			who := oauth.IdentityFrom(r.Context())
			// 4 caller
			in.caller = s.resolveCaller(who, msg.metaString(caller.MetaSubject), msg.metaString(caller.MetaSession), r.Header.Get(sessionHeader))
			// 5 tool: before scopes, admission and the audit's call
			// records (the name is the client's, of any length).
			if !knownTool(msg.Params.Name) {
				s.refuseUnknownTool(w, r, msg, in.caller)
				return
			}
			// 6 scope
			if !s.mayCall(w, r, msg.Params.Name) {
				return
			}
			in.tool = msg.Params.Name
			// 7 shed
			if msg.ID != nil {
				if shed, code := s.shedEarly(in.tool, in.caller, reserve); shed != nil {
					s.refusals.add(in.caller, in.tool, string(code))
					s.auditShed(r, &in.caller, in.tool, shed)
					s.writeToolResult(w, msg.ID, shed)
					return
				}
				in.shed = true
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
		in.cancel = ctx
		h.ServeHTTP(w, r.WithContext(withIntake(r.Context(), in)))
	})
}

// shedEarly is step 7: the encoded result of a call refused before the SDK
// spends anything on it, nil to go on. It decides as admission would, with
// the caller's flow: a polite caller is not shed for a greedy one's queue.
func (s *Server) shedEarly(tool string, cw caller.Caller, reserve bool) ([]byte, mcpwire.Code) {
	kind := admission.KindOf(tool)
	switch {
	case s.stoppingCtx.Err() != nil:
		return s.restartResult, mcpwire.CodeUnavailable
	case reserve && kind != admission.Control:
		// Past the connection cap only control work is served.
		return encodeResult(s.serverOverloaded(toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: every connection is in use; retry later"), kind)), mcpwire.CodeOverloaded
	}
	if te := s.unadmissible(kind); te != nil {
		return encodeResult(te), te.Code
	}
	switch {
	case tooldesc.ClassOf(tool) == mcpwire.ClassWait:
		// A wait holds no slot: the jobs manager bounds it.
	default:
		if ref := s.adm.ShedFlow(kind, flowOf(cw)); ref != nil {
			return encodeResult(admissionError(ref, s.adm.Limits())), mcpwire.CodeOverloaded
		}
	}
	return nil, ""
}

// unadmissible refuses a call of kind that no slot could take now: the
// process is stopping, or (for all but control work) memory is short.
func (s *Server) unadmissible(kind admission.Kind) *toolerr.Error {
	switch {
	case s.stoppingCtx.Err() != nil:
		return restartError()
	case kind != admission.Control && s.mem.Load().Shedding():
		return s.serverOverloaded(memoryError(), kind)
	}
	return nil
}

// admit is the MCP middleware every message passes through, whatever the
// transport; a tools/call goes on through steps 8 to 13 (callTool).
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
		return s.callTool(ctx, call, method, next)
	}
}

// callTool is one tools/call as the SDK dispatched it.
func (s *Server) callTool(ctx context.Context, call *mcp.CallToolRequest, method string, next mcp.MethodHandler) (mcp.Result, error) {
	var who *oauth.Identity
	if call.Extra != nil {
		who = oauth.IdentityOf(call.Extra.TokenInfo)
	}
	tool := call.Params.Name
	in := intakeOf(ctx)
	var cw caller.Caller
	if in != nil {
		cw = in.caller
	} else {
		// stdio: steps 4 and 5 here, before admission and the audit's
		// call records.
		cw = s.callerOf(who, call)
		if !knownTool(tool) {
			s.refusals.add(cw, unknownToolLabel, unknownToolOutcome)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: unknownTool(tool)}
		}
	}
	ctx, cancel := s.callContext(ctx, in)
	defer cancel()
	ctx = caller.With(ctx, cw)
	ctx = tools.WithArrival(ctx, time.Now())
	kind := admission.KindOf(tool)
	// 8 agree (HTTP), or 6 scope (stdio: no intake asked)
	if te := s.mayRun(in, who, tool); te != nil {
		return s.refuseCall(ctx, cw, call, te), nil
	}
	// 9 arguments: what the tool would refuse is refused before the policy
	// judges it, and the policy, the approvals, the audit and the tool all
	// read the same canonical bytes.
	args, te := s.tools.Args(tool, call.Params.Arguments)
	if te != nil {
		return s.refuseCall(ctx, cw, call, te), nil
	}
	call = withArguments(call, args)
	var req mcp.Request = call
	// 10 policy, after who may call what and before anything queues or
	// runs: a refusal or an ask never takes a slot.
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
	if tooldesc.ClassOf(tool) == mcpwire.ClassWait {
		return s.runWait(ctx, who, cw, call, method, next)
	}
	// 11 admission. The intake's shed answered for this moment unless the
	// user was asked meanwhile.
	if in == nil || !in.shed || approved != nil {
		if te := s.unadmissible(kind); te != nil {
			return s.refuseCall(ctx, cw, call, te), nil
		}
	}
	if te := s.auditRefusal(); te != nil && kind != admission.Control {
		return s.refuseCall(ctx, cw, call, te), nil
	}
	start := time.Now()
	permit, ref := s.admitted(ctx, kind, cw)
	wait := time.Since(start)
	if ref != nil {
		s.refusals.add(cw, tool, string(ref.te.Code))
		s.auditAdmissionRefusal(ctx, call, ref.te, ref.cause)
		return toolerr.Result(ref.te), nil
	}
	// 12 run
	s.sandboxes.count(ctx)
	ca := s.auditStart(ctx, call, wait) // 13 audit: the start record
	res, err, abandoned := s.runCall(ctx, tool, func(ctx context.Context) (mcp.Result, error) {
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
	// 13 audit: the end record and the log line
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

// refuseCall counts and audits a call refused after dispatch and before it
// ran, and is its answer.
func (s *Server) refuseCall(ctx context.Context, cw caller.Caller, call *mcp.CallToolRequest, te *toolerr.Error) mcp.Result {
	s.refusals.add(cw, call.Params.Name, string(te.Code))
	s.auditAdmissionRefusal(ctx, call, te, nil)
	return toolerr.Result(te)
}

// admissionRefusal is a refusal by admission and the error it came from.
type admissionRefusal struct {
	te    *toolerr.Error
	cause error
}

// admitted is step 11: a slot in the one shared controller, waited for
// under the call's context; shutdown takes queued calls out of the queue at
// once.
func (s *Server) admitted(ctx context.Context, kind admission.Kind, cw caller.Caller) (*admission.Permit, *admissionRefusal) {
	acqCtx, stopAcq := context.WithCancel(ctx)
	defer stopAcq()
	defer context.AfterFunc(s.stoppingCtx, stopAcq)()
	permit, err := s.adm.AcquireFlow(acqCtx, kind, flowOf(cw))
	if err != nil {
		te := admissionError(err, s.adm.Limits())
		if s.stoppingCtx.Err() != nil && ctx.Err() == nil {
			te = restartError()
		}
		return nil, &admissionRefusal{te, err}
	}
	return permit, nil
}

// mayRun is step 8 over HTTP: the SDK dispatched the tool the intake read
// and checked (the frame check makes them read alike; if they ever do not,
// no tool runs that the caller may not call). Over stdio it is step 6: the
// token's scopes grant the tool.
func (s *Server) mayRun(in *intake, who *oauth.Identity, tool string) *toolerr.Error {
	if in != nil {
		if in.tool != tool {
			s.disagreed.Add(1)
			s.log.Error("intake and dispatch disagree on the tool; refused", "intake", in.tool, "dispatched", tool)
			return toolerr.New(mcpwire.CodeInvalidArgument, "the request's tool name is ambiguous; refused")
		}
		return nil
	}
	if s.oauth != nil && who != nil && !s.oauth.MayCall(who, tool) {
		return toolerr.New(mcpwire.CodePermissionDenied, "tool %s is not granted by the token's scopes", tool)
	}
	return nil
}

// callContext is the call's context: cancelled at shutdown and, over
// HTTP, when the request ends (the SDK does not cancel a stateless
// request's handler when its client goes away).
func (s *Server) callContext(ctx context.Context, in *intake) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stopDown := context.AfterFunc(s.down, cancel)
	if in == nil || in.cancel == nil {
		return ctx, func() { stopDown(); cancel() }
	}
	stop := context.AfterFunc(in.cancel, cancel)
	return ctx, func() { stop(); stopDown(); cancel() }
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

// resolveCaller is the one resolution of a caller: the intake's, from its
// reading of the body, and stdio's, from the SDK's (callerOf).
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
