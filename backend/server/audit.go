package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// The audit trail's hooks: a start record after admission and before the
// tool acts, an end record after it returned (one call id), and every
// refusal before admission counted into the per-second aggregates. The
// vocabulary is package audit's.

// startWait bounds how long a call waits for its start record to reach
// the sink before the tool acts (see audit.Log.EmitWritten).
const startWait = 20 * time.Millisecond

// auditState is the server's audit log and call-id source.
type auditState struct {
	log    *audit.Log
	sink   string // journal, file or off: what auto chose
	refuse bool   // audit.onFailure refuse: no normal work while records are lost
	role   string
	prefix string
	next   atomic.Uint64
}

// openAudit builds the audit log cfg asks for. auto is the journal when
// the process runs under systemd and the journal's socket answers, else
// the file when one is set, else off.
func openAudit(cfg config.Audit, log *slog.Logger) (*auditState, error) {
	st := &auditState{role: os.Getenv(audit.RoleEnv), refuse: cfg.OnFailure == config.AuditRefuse}
	var b [4]byte
	_, _ = rand.Read(b[:])
	st.prefix = hex.EncodeToString(b[:])
	sink := cfg.Sink
	if sink == config.AuditAuto {
		switch {
		case audit.UnderSystemd() && audit.JournalAvailable():
			sink = config.AuditJournal
		case cfg.File != "":
			sink = config.AuditFile
		default:
			sink = config.AuditOff
		}
	}
	st.sink = sink
	var s audit.Sink
	switch sink {
	case config.AuditJournal:
		s = audit.Journal{}
	case config.AuditFile:
		f, err := audit.OpenFile(cfg.File, cfg.FileMaxBytes, cfg.FileKeep)
		if err != nil {
			return nil, fmt.Errorf("audit.file: %w", err)
		}
		s = f
	default:
		log.Warn("audit trail off", "sink", cfg.Sink, "reason", "not under systemd and audit.file unset, or audit.sink off")
		return st, nil
	}
	st.log = audit.New(audit.Options{Sink: s, Buffer: cfg.BufferRecords, Identifier: "mcp-backend"})
	log.Info("audit trail on", "sink", sink, "file", cfg.File)
	return st, nil
}

// auditRefusalPrefix starts the message of a call refused for the audit
// trail (refusalReason tells it from a restart by it).
const auditRefusalPrefix = "audit records cannot be written"

// auditRefusal is the refusal of normal work while the audit trail loses
// records under audit.onFailure refuse, nil otherwise. The refusals are
// themselves counted into refusal records: the first one the sink takes
// again ends it.
func (s *Server) auditRefusal() *toolerr.Error {
	if !s.audit.refuse || !s.audit.log.Failing() {
		return nil
	}
	te := toolerr.New(mcpwire.CodeUnavailable, auditRefusalPrefix+" (audit.onFailure is refuse; %d lost so far): normal work is refused until the %s takes records again; control tools still run",
		s.audit.log.Dropped(), s.audit.sink)
	te.RetryAfterMs = 1000
	return te
}

// Audit is the server's audit log (nil when off), for the process's start
// and stop records.
func (s *Server) Audit() *audit.Log { return s.audit.log }

// AuditSink names the sink in use: journal, file or off.
func (s *Server) AuditSink() string { return s.audit.sink }

// callAudit is one admitted call between its start and end records.
type callAudit struct {
	log   *audit.Log
	id    string
	tool  string
	who   []audit.Field
	start time.Time // the call's own time, on each of its records
}

// flowFields are who a call acts for and what it came through.
func (s *Server) flowFields(c caller.Caller, host, transport string) []audit.Field {
	var r audit.Record
	r.Add(audit.FieldPrincipalKind, string(c.Principal.Kind))
	r.Add(audit.FieldPrincipal, c.Principal.ID)
	r.Add(audit.FieldPrincipalHash, c.PrincipalHash)
	r.Add(audit.FieldClientID, c.ClientID)
	r.Add(audit.FieldConversation, c.Conversation)
	r.Add(audit.FieldConversationFrom, c.ConversationFrom)
	r.Add(audit.FieldHost, audit.Bound(host, audit.ValueBytes))
	r.Add(audit.FieldRole, s.audit.role)
	r.Add(audit.FieldTransport, transport)
	return r.Fields
}

func transportOf(ctx context.Context) (host, transport string) {
	in := intakeOf(ctx)
	if in == nil {
		return "", "stdio"
	}
	return in.host, "http"
}

// auditStart writes the start record of an admitted call: after the
// admission decision, before the tool acts.
func (s *Server) auditStart(ctx context.Context, call *mcp.CallToolRequest, wait time.Duration) *callAudit {
	l := s.audit.log
	if l == nil {
		return nil
	}
	who, _ := caller.From(ctx)
	host, transport := transportOf(ctx)
	c := &callAudit{log: l, tool: call.Params.Name, id: s.audit.prefix + "-" + strconv.FormatUint(s.audit.next.Add(1), 36), start: time.Now()}
	c.who = s.flowFields(who, host, transport)
	r := audit.Record{Time: c.start, Event: audit.EventCallStart}
	r.Message = fmt.Sprintf("tool call %s start: %s by %s", c.id, c.tool, who.Principal.Key())
	r.Add(audit.FieldCallID, c.id)
	r.Add(audit.FieldCallTime, audit.FormatTime(c.start))
	r.Fields = append(r.Fields, c.who...)
	r.Add(audit.FieldTool, c.tool)
	td, _ := tooldesc.Lookup(c.tool)
	r.Add(audit.FieldClass, string(tooldesc.ClassOf(c.tool)))
	r.AddInt(audit.FieldQueuedMs, wait.Milliseconds())
	if d, note, ok := decisionOf(ctx); ok {
		r.Fields = append(r.Fields, policyFields(d, note)...)
	}
	if sb, ok := sandbox.From(ctx); ok {
		r.Add(audit.FieldSandbox, sb.Name)
	}
	args := audit.Arguments(auditShape(c.tool), call.Params.Arguments)
	r.Fields = append(r.Fields, args...)
	if td.Audit.PID != "" { // a pid the kernel reuses: what it named then
		for _, f := range args {
			if f.Name == audit.FieldTargetPID {
				if t, ok := audit.TargetOf(f.Value); ok {
					r.Add(audit.FieldTargetStart, t.Start)
					r.Add(audit.FieldTargetComm, audit.Bound(t.Comm, audit.ValueBytes))
				}
			}
		}
	}
	l.EmitWritten(r, startWait)
	return c
}

// end writes the call's end record: its outcome, how long it ran and what
// it returned.
func (c *callAudit) end(res mcp.Result, err error, abandoned bool, dur time.Duration) {
	if c == nil {
		return
	}
	r := audit.Record{Event: audit.EventCallEnd}
	r.Add(audit.FieldCallID, c.id)
	r.Add(audit.FieldCallTime, audit.FormatTime(c.start))
	r.Fields = append(r.Fields, c.who...)
	r.Add(audit.FieldTool, c.tool)
	out := "ok"
	tr, _ := res.(*mcp.CallToolResult)
	switch {
	case abandoned:
		out = string(mcpwire.CodeUnavailable)
	case err != nil:
		out = "JSONRPC_ERROR"
	case tr != nil:
		out = outcome(tr)
	}
	r.Add(audit.FieldOutcome, out)
	r.AddInt(audit.FieldDurationMs, dur.Milliseconds())
	if tr != nil && !abandoned && err == nil {
		raw, _ := tr.StructuredContent.(json.RawMessage)
		n := len(raw)
		if raw == nil {
			for _, ct := range tr.Content {
				if t, ok := ct.(*mcp.TextContent); ok {
					n += len(t.Text)
				}
			}
		}
		r.AddInt(audit.FieldOutputBytes, int64(n))
		_, cut := tr.Meta[truncatedMeta]
		cut = cut || bytes.Contains(raw, []byte(`"truncated":true`)) || bytes.Contains(raw, []byte(`"outputLimited":true`))
		r.Add(audit.FieldTruncated, strconv.FormatBool(cut))
		td, _ := tooldesc.Lookup(c.tool)
		if td.EndExit {
			r.Add(audit.FieldExitCode, jsonScalar(raw, `"exitCode":`))
			r.Add(audit.FieldExitSignal, jsonScalar(raw, `"signal":`))
		}
		if td.EndJob {
			// The job the call started or touched (job.start's is known
			// only now; the others name theirs in the start record too).
			r.Add(audit.FieldJobID, jsonScalar(raw, `"id":`))
		}
	}
	r.Message = fmt.Sprintf("tool call %s end: %s %s in %d ms", c.id, c.tool, out, dur.Milliseconds())
	c.log.Emit(r)
}

// jsonScalar returns the number or string after key in compact JSON ("" for
// null or absent). In compact JSON `"key":` can only be a key: inside a
// string value every quote is escaped.
func jsonScalar(raw []byte, key string) string {
	i := bytes.Index(raw, []byte(key))
	if i < 0 {
		return ""
	}
	v := raw[i+len(key):]
	if len(v) > 0 && v[0] == '"' {
		var s string
		end := bytes.IndexByte(v[1:], '"')
		if end < 0 || json.Unmarshal(v[:end+2], &s) != nil {
			return ""
		}
		return audit.Bound(s, 64)
	}
	end := bytes.IndexAny(v, ",}")
	if end < 0 || string(v[:end]) == "null" {
		return ""
	}
	return string(v[:end])
}

// auditAdmissionRefusal counts a call the middleware refused before it
// ran: admission (queue full or timed out, cancelled while queued), the
// restart, the memory guard, the tool check. err is admission's, if any.
func (s *Server) auditAdmissionRefusal(ctx context.Context, call *mcp.CallToolRequest, te *toolerr.Error, err error) {
	l := s.audit.log
	if l == nil || te == nil {
		return
	}
	reason := refusalReason(te)
	switch {
	case errors.Is(err, admission.ErrQueueFull):
		reason = "queue-full"
	case errors.Is(err, admission.ErrQueueTimeout):
		reason = "queue-timeout"
	case errors.Is(err, admission.ErrCancelled):
		reason = "queue-cancelled"
	}
	who, _ := caller.From(ctx)
	host, transport := transportOf(ctx)
	if transport == "http" {
		host = s.hostLabel(host)
	}
	l.Refused(audit.Refusal{Status: http.StatusOK, Outcome: string(te.Code), Scope: te.Scope, Reason: reason, Tool: call.Params.Name,
		PrincipalKind: string(who.Principal.Kind), Principal: who.Principal.ID, PrincipalHash: who.PrincipalHash, Conversation: who.Conversation, Host: host})
}

// auditShed counts a tools/call the intake answered at once with the
// encoded result shed; who is the caller the intake resolved (nil when it
// had none).
func (s *Server) auditShed(r *http.Request, who *caller.Caller, tool string, shed []byte) {
	l := s.audit.log
	if l == nil {
		return
	}
	var res struct {
		Meta map[string]mcpwire.ErrorEnvelope `json:"_meta"`
	}
	_ = json.Unmarshal(shed, &res)
	te := (*toolerr.Error)(res.Meta[mcpwire.ErrorMetaKey].Error)
	if te == nil {
		te = toolerr.New(mcpwire.CodeOverloaded, "")
	}
	ref := audit.Refusal{Status: http.StatusOK, Outcome: string(te.Code), Scope: te.Scope, Reason: refusalReason(te), Tool: tool, Host: s.hostLabel(r.Host)}
	if who == nil {
		c := s.httpCaller(r, nil)
		who = &c
	}
	ref.PrincipalKind, ref.Principal, ref.PrincipalHash, ref.Conversation = string(who.Principal.Kind), who.Principal.ID, who.PrincipalHash, who.Conversation
	l.Refused(ref)
}

// refusalReason is a short, stable name for why a call was refused, so
// equal refusals aggregate (messages carry numbers).
func refusalReason(te *toolerr.Error) string {
	m := te.Message
	switch {
	case te.Code == mcpwire.CodeUnavailable && strings.HasPrefix(m, auditRefusalPrefix):
		return "audit"
	case te.Code == mcpwire.CodeUnavailable:
		return "restarting"
	case te.Code == mcpwire.CodeCancelled:
		return "queue-cancelled"
	case te.Code != mcpwire.CodeOverloaded:
		return "refused: " + audit.Bound(m, 120)
	case strings.Contains(m, "memory"):
		return "memory"
	case strings.Contains(m, "connection"):
		return "connections"
	case strings.Contains(m, "request-body"):
		return "body-budget"
	case strings.Contains(m, "queue wait"):
		return "queue-timeout"
	}
	return "queue-full"
}

// auditHTTPRefusal counts a request refused with status before it reached
// the tools (401, 403): under its principal when the token was verified
// (a tool outside its scopes), else as unauthenticated. Never the token.
// Everything in the key is one of a bounded set (the Host by what it
// matched, the reason without what the client chose), so a flood of
// anonymous requests is a few records a second, whatever it varies.
func (s *Server) auditHTTPRefusal(r *http.Request, status int, code, scope, reason, tool string) {
	l := s.audit.log
	if l == nil {
		return
	}
	ref := audit.Refusal{Status: status, Outcome: code, Scope: scope, Reason: stableReason(reason), Tool: tool, Host: s.hostLabel(r.Host)}
	if oauth.IdentityFrom(r.Context()) != nil {
		who := s.httpCaller(r, nil)
		ref.PrincipalKind, ref.Principal, ref.PrincipalHash, ref.Conversation = string(who.Principal.Kind), who.Principal.ID, who.PrincipalHash, who.Conversation
	}
	if ref.Outcome == "" {
		ref.Outcome = "unauthorized"
	}
	l.Refused(ref)
}

// httpCaller resolves the caller of a request refused before the SDK saw
// it, from the same facts admit uses.
func (s *Server) httpCaller(r *http.Request, body []byte) caller.Caller {
	var subject, session string
	if len(body) > 0 {
		var m struct {
			Params struct {
				Meta map[string]any `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) == nil {
			subject, _ = m.Params.Meta[caller.MetaSubject].(string)
			session, _ = m.Params.Meta[caller.MetaSession].(string)
		}
	}
	return s.resolveCaller(oauth.IdentityFrom(r.Context()), subject, session, r.Header.Get(sessionHeader))
}

func (s *Server) auditMetrics() mcpwire.AuditMetrics {
	l := s.audit.log
	return mcpwire.AuditMetrics{Sink: s.audit.sink, Written: l.Written(), Dropped: l.Dropped(), Pending: int64(l.Pending())}
}

// auditShape is how the audit trail records a tool's arguments; nil for a
// name that is no tool of ours (its argument names only).
func auditShape(tool string) *audit.Shape {
	d, ok := tooldesc.Lookup(tool)
	if !ok {
		return nil
	}
	return new(audit.Shape(d.Audit))
}

// auditJobEnd writes a job's job.end record: whose job (principal and
// conversation as the start record named them), how it ended.
func (s *Server) auditJobEnd(spec jobs.Spec, st mcpwire.JobStatus) {
	l := s.audit.log
	if l == nil {
		return
	}
	r := audit.Record{Event: audit.EventJobEnd}
	kind, id, _ := strings.Cut(spec.Owner, ":")
	r.Add(audit.FieldPrincipalKind, kind)
	r.Add(audit.FieldPrincipal, id)
	r.Add(audit.FieldPrincipalHash, s.ids.Principal(caller.Principal{Kind: caller.Kind(kind), ID: id}))
	r.Add(audit.FieldConversation, spec.Conversation)
	r.Add(audit.FieldRole, s.audit.role)
	r.Add(audit.FieldJobID, spec.ID)
	r.Add(audit.FieldJobState, st.State)
	r.Add(audit.FieldUnit, spec.Unit)
	if st.ExitCode != nil {
		r.AddInt(audit.FieldExitCode, int64(*st.ExitCode))
	}
	if st.Signal != nil {
		r.Add(audit.FieldExitSignal, *st.Signal)
	}
	r.AddInt(audit.FieldDurationMs, st.DurationMs)
	r.AddInt(audit.FieldOutputBytes, st.StdoutBytes+st.StderrBytes)
	r.Add(audit.FieldCommand, audit.Bound(spec.Command, audit.CommandBytes))
	r.Message = fmt.Sprintf("job %s ended: %s", spec.ID, st.State)
	l.Emit(r)
}
