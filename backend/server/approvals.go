package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Operator approvals. An ask no one can answer in the client becomes a
// pending approval in the state directory (package approvals); the call's
// result is NEEDS_APPROVAL with its id. The operator decides with mcpctl
// approvals. The same call sent again (same principal, tool and
// arguments: the approval's digest) reports the status; once approved it
// runs, exactly once (an exclusive claim): a command as a job (job.start),
// whose id the result names and whose output the job tools read; any
// other tool as the call itself. An approval is bound to its call by the
// digest, expires (policy.approvals.expireMs), and is gone after it ran:
// the same call later needs a new approval.

type approvalState struct {
	store *approvals.Store
	cfg   policy.Approvals
	mu    sync.Mutex // one lookup-or-create at a time (the bounds)
	// places shares the pending places: max-min across principals, then
	// conversations, as jobs' are (under mu).
	places *jobs.Places
}

// approvalsDir is where pending approvals live: policy.approvals.dir, else
// the unit's state directory, else a private temporary directory.
func openApprovals(cfg config.Config, asks bool) (*approvalState, error) {
	dir := cfg.Policy.Approvals.Dir
	if dir == "" {
		if sd := os.Getenv("STATE_DIRECTORY"); sd != "" {
			dir = filepath.Join(filepath.SplitList(sd)[0], "approvals")
		} else if !asks {
			// No policy: nothing will be stored; nothing to make.
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("mcp-backend-approvals-%d", os.Getpid()))
		} else {
			d, err := os.MkdirTemp("", "mcp-backend-approvals-")
			if err != nil {
				return nil, fmt.Errorf("approvals: %w", err)
			}
			dir = d
		}
	}
	st, err := approvals.Open(dir, nil)
	if err != nil {
		return nil, err
	}
	a := cfg.Policy.Approvals
	places := jobs.NewPlaces("pending approvals", "policy.approvals.maxPending", "policy.approvals.maxPendingPerPrincipal",
		"policy.approvals.maxPendingPerConversation", a.MaxPending, a.MaxPendingPerPrincipal, a.MaxPendingPerConversation)
	return &approvalState{store: st, cfg: a, places: places}, nil
}

// approvalRun is what enforce hands back for an approved call: the request
// to run instead (a command as job.start) and how to turn its result into
// the caller's.
type approvalRun struct {
	req  *mcp.CallToolRequest
	post func(mcp.Result) mcp.Result
}

// pendApproval looks up the call's approval, or makes one.
func (s *Server) pendApproval(ctx context.Context, cw caller.Caller, call *mcp.CallToolRequest, d policy.Decision) (approvalNote, *mcp.CallToolResult, *approvalRun) {
	st := s.approvals
	p := call.Params
	dg := callDigest(cw, p.Name, p.Arguments)
	digest := hex.EncodeToString(dg[:])
	note := approvalNote{via: "approval"}
	st.mu.Lock()
	defer st.mu.Unlock()
	list, err := st.store.List()
	if err != nil {
		note.answer = "unavailable"
		return note, toolerr.Result(toolerr.New(mcpwire.CodeInternal, "needs approval, and the approvals store cannot be read: %v", err)), nil
	}
	now := time.Now()
	held := map[jobs.Holder]int{}
	for _, r := range list {
		if now.After(r.End().Add(time.Duration(st.cfg.ExpireMs) * time.Millisecond)) {
			st.store.Remove(r.ID) // long over: forget it
			continue
		}
		if r.Status == mcpwire.ApprovalPending {
			held[jobs.Holder{Principal: caller.Principal{Kind: caller.Kind(r.PrincipalKind), ID: r.Principal}, Conversation: r.Conversation}]++
		}
		if r.Digest != digest {
			continue
		}
		note.id = r.ID
		switch r.Status {
		case mcpwire.ApprovalPending:
			note.answer = "pending"
			return note, needsApproval(r.Approval, d, st.store.Notified()), nil
		case mcpwire.ApprovalDenied:
			note.answer, note.by = "denied", "operator"
			st.store.Remove(r.ID)
			te := policyRefusal(d, "the operator denied approval "+r.ID)
			te.ApprovalID, te.ApprovalStatus = r.ID, r.Status
			return note, toolerr.Result(te), nil
		case mcpwire.ApprovalApproved:
			note.by = "operator"
			if r.Grant != nil {
				// Granted since askFor looked: run it as a grant does.
				note.via, note.answer, note.grant = "grant", "granted", r.ID
				return note, nil, &approvalRun{}
			}
			if r.JobID != "" || st.store.Claimed(r.ID) {
				note.answer = "used"
				te := policyRefusal(d, "approval "+r.ID+" was used already (an approval runs its call once)")
				te.ApprovalID, te.ApprovalStatus, te.JobID = r.ID, r.Status, r.JobID
				return note, toolerr.Result(te), nil
			}
			run, te := s.approvedRun(call, r)
			if te != nil {
				// Not claimed: what the stored arguments would run is
				// refused, and the approval stays for the call as it was.
				note.answer = "invalid"
				return note, toolerr.Result(te), nil
			}
			ok, err := st.store.Claim(r.ID)
			if errors.Is(err, approvals.ErrExpired) {
				note.answer = "expired"
				te := policyRefusal(d, "approval "+r.ID+" expired before its call came back; the same call now makes a new one")
				te.ApprovalID, te.ApprovalStatus = r.ID, mcpwire.ApprovalExpired
				st.store.Remove(r.ID)
				return note, toolerr.Result(te), nil
			}
			if te := toolerr.NoSpace(err, "approved, and its claim cannot be stored", approvalRoom); te != nil {
				note.answer = "unavailable"
				return note, toolerr.Result(te), nil
			}
			if err != nil || !ok {
				note.answer = "used"
				return note, toolerr.Result(policyRefusal(d, "approval "+r.ID+" was used already")), nil
			}
			note.answer = "approved"
			return note, nil, run
		}
		// expired: a new one below. An ended grant stays for mcpctl
		// approvals show (until its end and the expiry after it).
		if r.Grant == nil {
			st.store.Remove(r.ID)
		}
	}
	if why := st.places.Admit(held, cw, now); why != "" {
		note.answer = "refused"
		// Beyond a share or the places kept for others, the principal
		// waits; beyond the cap everyone does.
		scope := mcpwire.ScopePrincipal
		switch {
		case strings.HasPrefix(why, "this conversation"):
			scope = mcpwire.ScopeConversation
		case strings.Contains(why, "the most this backend allows"):
			scope = mcpwire.ScopeServer
		}
		te := toolerr.New(mcpwire.CodeOverloaded, "needs approval, and no approval can be made pending now: %s; wait for the operator to decide them", why)
		te.Scope, te.RetryAfterMs = scope, 60000
		return note, toolerr.Result(te), nil
	}
	r := approvals.Record{
		Approval: mcpwire.Approval{
			ID: approvals.NewID(), Tool: p.Name, Target: d.Target, Parts: d.Parts, Rule: d.Rule, Reason: d.Reason,
			PrincipalKind: string(cw.Principal.Kind), Principal: cw.Principal.ID, Conversation: cw.Conversation,
			Arguments: p.Arguments,
			CreatedAt: now.UTC(), ExpiresAt: now.Add(time.Duration(st.cfg.ExpireMs) * time.Millisecond).UTC(),
		},
		Digest: digest,
	}
	if err := st.store.Create(r); err != nil {
		note.answer = "unavailable"
		if te := toolerr.NoSpace(err, "needs approval, and it cannot be stored", approvalRoom); te != nil {
			return note, toolerr.Result(te), nil
		}
		return note, toolerr.Result(toolerr.New(mcpwire.CodeInternal, "needs approval, and it cannot be stored: %v", err)), nil
	}
	note.id, note.answer = r.ID, "pending"
	r.Status = mcpwire.ApprovalPending
	return note, needsApproval(r.Approval, d, st.store.Notified()), nil
}

// granted looks for a live grant of exactly this call (same principal,
// tool and arguments: the digest): ok means run it, as itself, without
// asking; the note names the grant for the audit records.
func (s *Server) granted(cw caller.Caller, call *mcp.CallToolRequest) (approvalNote, bool) {
	st := s.approvals
	dg := callDigest(cw, call.Params.Name, call.Params.Arguments)
	digest := hex.EncodeToString(dg[:])
	st.mu.Lock()
	defer st.mu.Unlock()
	list, err := st.store.List()
	if err != nil {
		return approvalNote{}, false // the pending path says why
	}
	for _, r := range list {
		if r.Digest == digest && r.Grant != nil && r.Grant.Live {
			return approvalNote{via: "grant", by: "operator", answer: "granted", id: r.ID, grant: r.ID}, true
		}
	}
	return approvalNote{}, false
}

// approvalRoom is the free space an approval's files take: a record
// (well under a page) written through a temporary file.
const approvalRoom = 8 << 10

// needsApproval is the NEEDS_APPROVAL result of a pending approval: what
// the operator is asked about is the whole call.
// notified says the operator is told of it (a notifier is configured):
// the text says so, and what to do once they approve.
func needsApproval(a mcpwire.Approval, d policy.Decision, notified bool) *mcp.CallToolResult {
	// The view goes in whole (each value already cut at shownBytes,
	// visibly); the message is bounded as toolerr bounds any, visibly.
	te := toolerr.New(mcpwire.CodeNeedsApproval, "%s", "")
	told := ""
	if notified {
		told = fmt.Sprintf("The operator has been notified of approval %s (it expires at %s). ", a.ID, a.ExpiresAt.Format(time.RFC3339))
	}
	te.Message = toolerr.Cut(fmt.Sprintf("needs the operator's approval (rule %s: %s): pending approval %s, until %s, for the whole call:\n%s\n"+
		"%sThe operator runs: mcpctl approvals approve %s. "+
		"Then send this same call again: a command then starts as a job whose output job.output and job.wait read.",
		toolerr.Cut(d.Rule, toolerr.MaxQuoted), toolerr.Cut(orNone(d.Reason), toolerr.MaxQuoted), a.ID, a.ExpiresAt.Format(time.RFC3339),
		approvals.ViewOf(a.Tool, a.Arguments, a.Parts).Text(shownBytes), told, a.ID), toolerr.MaxMessage)
	te.ApprovalID, te.ApprovalStatus = a.ID, a.Status
	return toolerr.Result(te)
}

// shownBytes bounds each value shown of a call asked about (the whole
// view is bounded again by toolerr's and the form's limits, visibly).
const shownBytes = 512

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// approvedRun is how an approved call runs: as the tool its descriptor
// names (a shell.exec as the job.start of the same command, answered
// NEEDS_APPROVAL with status approved and the job's id, since its result
// is a job's), or as itself.
func (s *Server) approvedRun(call *mcp.CallToolRequest, r approvals.Record) (*approvalRun, *toolerr.Error) {
	d, _ := tooldesc.Lookup(call.Params.Name)
	as := d.ApprovedAs
	if as == "" {
		// The call itself, whose arguments tools.Args made canonical: the
		// digest says they are the stored ones.
		return &approvalRun{}, nil
	}
	// Re-validated as the tool it runs as before anything is claimed.
	if _, te := s.tools.Args(as, r.Arguments); te != nil {
		return nil, te
	}
	// The stored arguments, as approved, run: job.start takes every
	// argument shell.exec does, and decodes them itself.
	nreq := *call
	np := *call.Params
	np.Name, np.Arguments = as, r.Arguments
	nreq.Params = &np
	id := r.ID
	return &approvalRun{req: &nreq, post: func(res mcp.Result) mcp.Result {
		tr, ok := res.(*mcp.CallToolResult)
		if !ok || tr == nil || tr.IsError {
			return res
		}
		var st mcpwire.JobStartResult
		raw, _ := json.Marshal(tr.StructuredContent)
		if json.Unmarshal(raw, &st) != nil || st.Job.ID == "" {
			return res
		}
		_ = s.approvals.store.SetJob(id, st.Job.ID)
		te := toolerr.New(mcpwire.CodeNeedsApproval, "approved by the operator (approval %s): running as job %s; read its output with job.output or job.wait", id, st.Job.ID)
		te.ApprovalID, te.ApprovalStatus, te.JobID = id, mcpwire.ApprovalApproved, st.Job.ID
		return toolerr.Result(te)
	}}, nil
}

// approvalAnswers are the notes of an ask that ended without running.
var refusedAnswers = []string{"declined", "cancelled", "denied", "invalid", "missing", "used", "unavailable", "refused", "expired"}

func refusedAnswer(a string) bool { return slices.Contains(refusedAnswers, a) }
