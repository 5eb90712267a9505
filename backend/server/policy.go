package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
)

// policyState is the compiled policy and its counts for /metrics.
type policyState struct {
	p                *policy.Policy // nil: no policy, every call allowed unlooked
	allow, ask, deny atomic.Int64
	approved         atomic.Int64 // asks that ran after an accept or an approval
	refused          atomic.Int64 // asks declined, cancelled, denied or expired
}

func (ps *policyState) metrics() mcpwire.PolicyMetrics {
	return mcpwire.PolicyMetrics{
		Enabled: ps.p != nil,
		Allow:   ps.allow.Load(), Ask: ps.ask.Load(), Deny: ps.deny.Load(),
		Approved: ps.approved.Load(), Refused: ps.refused.Load(),
	}
}

// callOf is what the policy looks at of a call.
func callOf(who *oauth.Identity, cw caller.Caller, call *mcp.CallToolRequest) policy.Call {
	c := policy.Call{
		PrincipalKind: string(cw.Principal.Kind),
		PrincipalID:   cw.Principal.ID,
		Tool:          call.Params.Name,
		Args:          call.Params.Arguments,
	}
	if who != nil && cw.Principal.Kind == caller.OAuth {
		c.Scopes = who.Scopes
	}
	return c
}

// systemdUnitNames asks the system's systemd what a unit name resolves to
// (its Id and Names), bounded.
func systemdUnitNames(log *slog.Logger) policy.UnitResolver {
	return func(ctx context.Context, unit string) (string, []string, error) {
		ctx, cancel := context.WithTimeout(ctx, unitResolveTimeout)
		defer cancel()
		return systemd.ResolveUnit(ctx, systemd.Options{Logger: log}, unit)
	}
}

// unitResolveTimeout bounds asking systemd about a unit's names: a local
// systemd answers in milliseconds (service.* bound theirs the same).
const unitResolveTimeout = 10 * time.Second

type decisionKey struct{}

// decisionOf returns the policy decision a call ran under, if a policy
// looked at it.
func decisionOf(ctx context.Context) (policy.Decision, approvalNote, bool) {
	d, ok := ctx.Value(decisionKey{}).(decided)
	return d.d, d.note, ok
}

type decided struct {
	d    policy.Decision
	note approvalNote
}

// approvalNote says who answered an ask and how ("" when none was asked).
type approvalNote struct {
	by, via, answer, id string
	grant               string // the grant a call runs under
}

// enforce decides a call that passed authentication and the scope check,
// before admission. A nil result means run it: with ctx, which carries the
// decision for its audit records, and, for a call the operator approved,
// run (the request to run instead and the answer's post-processing). An
// ask is put to the user when the client can be asked (elicitation), else
// becomes a pending approval for the operator.
func (s *Server) enforce(ctx context.Context, who *oauth.Identity, cw caller.Caller, call *mcp.CallToolRequest) (context.Context, *mcp.CallToolResult, *approvalRun) {
	ps := s.policy
	if ps.p == nil {
		return ctx, nil, nil
	}
	c := callOf(who, cw, call)
	if err := ps.p.ResolveUnits(ctx, &c, s.unitNames); err != nil {
		s.log.Warn("policy: systemd did not resolve the unit: the unit files' names decide", "tool", c.Tool, "err", err)
	}
	d := ps.p.Decide(c)
	switch d.Action {
	case policy.Allow:
		ps.allow.Add(1)
		return context.WithValue(ctx, decisionKey{}, decided{d: d}), nil, nil
	case policy.Deny:
		ps.deny.Add(1)
		s.auditPolicy(ctx, call, d, approvalNote{})
		return ctx, toolerr.Result(policyRefusal(d, "refused by policy")), nil
	}
	ps.ask.Add(1)
	note, res, run := s.askFor(ctx, cw, call, d)
	s.auditPolicy(ctx, call, d, note)
	if res != nil {
		if refusedAnswer(note.answer) {
			ps.refused.Add(1)
		}
		return ctx, res, nil
	}
	ps.approved.Add(1)
	return context.WithValue(ctx, decisionKey{}, decided{d: d, note: note}), nil, run
}

// askFor puts an ask decision to whoever can answer it: the user through
// the client (elicitation) when the client can be asked, else the
// operator (a pending approval). A rule whose approver is the operator is
// never put to the client: its user's yes, or a script's, is not enough.
// A nil result means approved: run it.
func (s *Server) askFor(ctx context.Context, cw caller.Caller, call *mcp.CallToolRequest, d policy.Decision) (approvalNote, *mcp.CallToolResult, *approvalRun) {
	// The operator said yes to exactly this call for a while: no one is
	// asked again until the grant ends.
	if note, ok := s.granted(cw, call); ok {
		return note, nil, &approvalRun{}
	}
	if d.Approver != policy.ApproverOperator {
		if note, res, asked := s.elicit(ctx, call, d); asked {
			return note, res, nil
		}
	}
	return s.pendApproval(ctx, cw, call, d)
}

// policyRefusal is the PERMISSION_DENIED error of a decision, naming its
// rule and reason.
func policyRefusal(d policy.Decision, what string) *toolerr.Error {
	reason := d.Reason
	if reason == "" {
		reason = "no reason given"
	}
	msg := fmt.Sprintf("%s: rule %s (%s)", what, d.Rule, reason)
	if d.Target != "" {
		msg += ": " + toolerr.Cut(d.Target, toolerr.MaxQuoted)
	}
	return toolerr.New(mcpwire.CodePermissionDenied, "%s", msg)
}

// policyFields are a decision's audit fields.
func policyFields(d policy.Decision, note approvalNote) []audit.Field {
	var r audit.Record
	r.Add(audit.FieldPolicyAction, string(d.Action))
	r.Add(audit.FieldPolicyRule, d.Rule)
	r.Add(audit.FieldPolicyReason, audit.Bound(d.Reason, audit.ValueBytes))
	r.Add(audit.FieldPolicyTarget, audit.Bound(d.Target, audit.ValueBytes))
	r.Add(audit.FieldApprovedBy, note.by)
	r.Add(audit.FieldApprovalVia, note.via)
	r.Add(audit.FieldApproval, note.answer)
	r.Add(audit.FieldApprovalID, note.id)
	r.Add(audit.FieldGrantID, note.grant)
	return r.Fields
}

// auditPolicy writes a decision that did not simply let the call run (a
// refusal, an ask and its answer) as its own record.
func (s *Server) auditPolicy(ctx context.Context, call *mcp.CallToolRequest, d policy.Decision, note approvalNote) {
	l := s.audit.log
	if l == nil {
		return
	}
	who, _ := caller.From(ctx)
	host, transport := transportOf(ctx)
	r := audit.Record{Event: audit.EventPolicy}
	r.Message = fmt.Sprintf("policy: %s %s by %s: %s", call.Params.Name, d.Action, who.Principal.Key(), d.Describe())
	if note.answer != "" {
		r.Message += " [" + note.via + ": " + note.answer + "]"
	}
	r.Fields = append(r.Fields, s.flowFields(who, host, transport)...)
	r.Add(audit.FieldTool, call.Params.Name)
	r.Fields = append(r.Fields, audit.Arguments(auditShape(call.Params.Name), call.Params.Arguments)...)
	r.Fields = append(r.Fields, policyFields(d, note)...)
	l.Emit(r)
}
