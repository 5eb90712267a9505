package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Asking the user. The server is stateless over HTTP (each POST its own SDK
// session, answered as JSON), so it cannot send the client a request in the
// middle of a call. It asks the way the stateless protocol does (the multi
// round-trip "input_required" result): the call's answer is an elicitation
// request and a signed request state; the client asks the user, and sends
// the same call again with the answer and the state. The state binds the
// answer to exactly that call (principal, tool, arguments), expires, and is
// spent once: a replayed answer runs nothing.
//
// Only clients that declare elicitation on the call itself (the 2026-07-28
// protocol's per-request capabilities) are asked; any other client's ask
// becomes a pending approval for the operator.

// elicitKey names the one input request of an ask.
const elicitKey = "mcp-backend/policy"

// elicitTTL is how long the user has to answer.
const elicitTTL = 10 * time.Minute

// asker holds the signing key and the spent states.
type asker struct {
	key   [32]byte
	now   func() time.Time
	mu    sync.Mutex
	spent map[[16]byte]time.Time // nonce -> expiry
}

func newAsker() *asker {
	a := &asker{now: time.Now, spent: map[[16]byte]time.Time{}}
	if _, err := rand.Read(a.key[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return a
}

// maxSpent bounds the spent-state table; beyond it, new asks are refused
// until old ones expire (each lives elicitTTL at most).
const maxSpent = 1 << 16

// callDigest binds a state, or an approval, to one call: its principal,
// tool and arguments in the canonical form tools.Args made of them (key
// order and spacing do not make the same call look different; a number
// written otherwise does).
func callDigest(cw caller.Caller, tool string, args json.RawMessage) [32]byte {
	h := sha256.New()
	for _, s := range []string{cw.Principal.Key(), "\x00", tool, "\x00"} {
		h.Write([]byte(s))
	}
	h.Write(args)
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// state is nonce(16) | expiry unix ms(8) | mac(32) over nonce, expiry and
// the call digest.
func (a *asker) issue(d [32]byte) string {
	var buf [56]byte
	_, _ = rand.Read(buf[:16])
	binary.BigEndian.PutUint64(buf[16:24], uint64(a.now().Add(elicitTTL).UnixMilli()))
	copy(buf[24:], a.mac(buf[:24], d))
	return base64.RawURLEncoding.EncodeToString(buf[:])
}

func (a *asker) mac(head []byte, d [32]byte) []byte {
	m := hmac.New(sha256.New, a.key[:])
	m.Write(head)
	m.Write(d[:])
	return m.Sum(nil)
}

// redeem checks a state for call digest d and spends it: "" when valid,
// else why not.
func (a *asker) redeem(state string, d [32]byte) string {
	b, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil || len(b) != 56 {
		return "the approval state is not one this server issued"
	}
	if !hmac.Equal(b[24:], a.mac(b[:24], d)) {
		return "the approval was given for another call (or by another server process)"
	}
	exp := time.UnixMilli(int64(binary.BigEndian.Uint64(b[16:24])))
	now := a.now()
	if now.After(exp) {
		return "the approval expired"
	}
	var nonce [16]byte
	copy(nonce[:], b[:16])
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, e := range a.spent {
		if now.After(e) {
			delete(a.spent, n)
		}
	}
	if _, used := a.spent[nonce]; used {
		return "the approval was already used"
	}
	if len(a.spent) >= maxSpent {
		return "too many approvals in flight; ask again later"
	}
	a.spent[nonce] = exp
	return ""
}

// canElicit reports whether the client declared form elicitation on this
// call.
func canElicit(call *mcp.CallToolRequest) bool {
	caps := call.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	e := caps.Elicitation
	return e.Form != nil || e.URL == nil // an empty object means form
}

// elicit asks the user when the client can be asked: the first round
// answers with the question, the second (the answer and the state) decides.
// asked is false when the client cannot be asked.
func (s *Server) elicit(ctx context.Context, call *mcp.CallToolRequest, d policy.Decision) (approvalNote, *mcp.CallToolResult, bool) {
	p := call.Params
	answered := p.RequestState != "" || p.InputResponses != nil
	if !answered && !canElicit(call) {
		return approvalNote{}, nil, false
	}
	cw, _ := caller.From(ctx)
	digest := callDigest(cw, p.Name, p.Arguments)
	note := approvalNote{via: "elicitation"}
	q := &mcp.ElicitParams{
		Mode:    "form",
		Message: elicitMessage(p.Name, p.Arguments, d),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Run it", "description": "Run exactly this call once"},
			},
			"required": []string{"approve"},
		},
	}
	if _, perCall := p.Meta[mcp.MetaKeyClientCapabilities]; !answered && !perCall {
		// The capabilities came with the session's initialize: a session
		// that lives across calls (stdio), which can ask in the middle of
		// the call.
		r, err := call.Session.Elicit(ctx, q)
		if err != nil {
			note.answer = "unavailable"
			return note, toolerr.Result(policyRefusal(d, "needs approval, and asking the user failed ("+err.Error()+")")), true
		}
		return s.answer(note, r, d)
	}
	if !answered {
		note.answer = "asked"
		res, err := inputRequired(q, s.ask.issue(digest))
		if err != nil {
			return note, toolerr.Result(toolerr.New(mcpwire.CodeInternal, "cannot ask for approval: %v", err)), true
		}
		return note, res, true
	}
	if why := s.ask.redeem(p.RequestState, digest); why != "" {
		note.answer = "invalid"
		return note, toolerr.Result(policyRefusal(d, "needs approval, and "+why)), true
	}
	r, _ := p.InputResponses[elicitKey].(*mcp.ElicitResult)
	if r == nil {
		note.answer = "missing"
		return note, toolerr.Result(policyRefusal(d, "needs approval, and the answer is missing")), true
	}
	return s.answer(note, r, d)
}

// answer turns the user's answer into the call's fate: run on accept with
// approve set, PERMISSION_DENIED otherwise.
func (s *Server) answer(note approvalNote, r *mcp.ElicitResult, d policy.Decision) (approvalNote, *mcp.CallToolResult, bool) {
	note.by = "user"
	switch {
	case r.Action == "accept" && r.Content["approve"] == true:
		note.answer = "accepted"
		return note, nil, true
	case r.Action == "accept", r.Action == "decline":
		note.answer = "declined"
	default:
		note.answer = "cancelled"
	}
	return note, toolerr.Result(policyRefusal(d, "the user did not approve")), true
}

// elicitMessage shows the user the whole call (every part of a command,
// env, cwd, each part with the rule that judged it) and the rule that
// asks.
func elicitMessage(tool string, args json.RawMessage, d policy.Decision) string {
	reason := d.Reason
	if reason == "" {
		reason = "no reason given"
	}
	view := approvals.ViewOf(tool, args, d.Parts).Text(shownBytes)
	return toolerr.Cut(fmt.Sprintf("Allow %s to run this once?\n\n%s\n\nPolicy rule %s asks first: %s", tool, view, d.Rule, reason), elicitBytes)
}

// elicitBytes bounds the consent form's text; a cut says so.
const elicitBytes = 8192

// inputRequired builds the input_required result. The SDK sets the result
// type only on results its tool handlers return; the middleware answers
// before any handler, so the type travels through the result's own JSON.
func inputRequired(q *mcp.ElicitParams, state string) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{}, InputRequests: mcp.InputRequestMap{elicitKey: q}, RequestState: state})
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["resultType"] = json.RawMessage(`"input_required"`)
	if b, err = json.Marshal(m); err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
