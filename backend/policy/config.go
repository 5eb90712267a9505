// Package policy decides, before a tool runs, whether a call may run
// (allow), needs someone's approval first (ask) or is refused (deny): an
// ordered list of rules over the caller, the tool and its arguments, from
// the backend's config "policy". Shell commands (shell.exec, job.start)
// are judged as a shell reads them: parsed with mvdan.cc/sh, every simple
// command in every list, pipeline, subshell, substitution and function
// body judged after normalisation, and what the parser cannot see through
// (eval, a command name from a variable, interpreters given code) judged
// "opaque". Rules match what the system acts on: a unit as systemd
// resolves it (ResolveUnits asks the caller's systemd), a signal as
// process.kill reads it. The package reads no state but the call and, for
// path and unit rules, the file system (symlinks, hard links, the unit
// files).
package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/internal/signals"
)

// Action is what a rule (or the default) decides.
type Action string

// The actions, in increasing precedence.
const (
	Allow Action = "allow"
	Ask   Action = "ask"
	Deny  Action = "deny"
)

// rank orders actions: deny > ask > allow.
func (a Action) rank() int {
	switch a {
	case Deny:
		return 3
	case Ask:
		return 2
	case Allow:
		return 1
	}
	return 0
}

// Config is the "policy" section of the backend's config.
type Config struct {
	// Default is what a call no rule decides gets: allow (the default,
	// today's behaviour), ask or deny.
	Default Action `json:"default"`
	// Opaque is what a shell command part the parser cannot see through
	// gets when command rules apply to the call: ask (default) or deny.
	Opaque Action `json:"opaque"`
	// Rules are checked all; deny wins over ask over allow.
	Rules []Rule `json:"rules"`
	// Approvals bounds the operator approvals of ask decisions.
	Approvals Approvals `json:"approvals"`
}

// Approvals configures pending approvals (calls waiting for the operator).
type Approvals struct {
	// Dir holds them; empty: approvals/ in the unit's state directory
	// (mcpctl approvals' default), else a private temporary directory.
	Dir string `json:"dir"`
	// ExpireMs is how long a pending approval waits for a decision, and
	// how long an approved one waits for its call.
	ExpireMs int64 `json:"expireMs"`
	// MaxPendingPerConversation bounds one conversation's pending ones.
	MaxPendingPerConversation int `json:"maxPendingPerConversation"`
	// MaxPendingPerPrincipal bounds one principal's, whatever its
	// conversations; within MaxPending they are shared max-min across
	// principals, then conversations, as jobs are.
	MaxPendingPerPrincipal int `json:"maxPendingPerPrincipal"`
	// MaxPending bounds them all.
	MaxPending int `json:"maxPending"`
}

// Rule is one entry of policy.rules.
type Rule struct {
	ID     string `json:"id"`
	Action Action `json:"action"`
	// Reason is shown with a refusal or an approval request.
	Reason string `json:"reason"`
	// Approver is who may say yes to an ask rule: ApproverUser (the
	// client's user through elicitation, or the operator; the default) or
	// ApproverOperator (always a pending approval: a token holder whose
	// client answers its own questions cannot approve it).
	Approver string `json:"approver"`
	// Principals the rule applies to (any of them); empty: everyone.
	Principals []Principal `json:"principals"`
	// Tools the rule applies to: names or globs ("service.*"). Empty: the
	// tools its matchers are about, or every tool when it has none.
	Tools []string `json:"tools"`
	// Commands are shell command patterns (shell.exec, job.start).
	Commands []string `json:"commands"`
	// Paths are path globs in files.deny's language (file.*).
	Paths []string `json:"paths"`
	// Units are unit name globs (service.*).
	Units []string `json:"units"`
	// Signals are signal names or numbers (process.kill; TERM when absent).
	Signals []string `json:"signals"`
	// PIDs are pids or ranges "LO-HI" (process.kill).
	PIDs []string `json:"pids"`
	// Examples are calls the rule must and must not decide (examples.go).
	Examples Examples `json:"examples"`
	// Sandbox names the profile (the backend's "sandbox") the commands
	// this rule allows, or approves after an ask, run in; empty: the
	// action's default (sandbox.allow, sandbox.approved).
	Sandbox string `json:"sandbox,omitempty"`
}

// Who may approve an ask (Rule.Approver).
const (
	ApproverUser     = "user"
	ApproverOperator = "operator"
)

// Principal matches callers: kind (operator, oauth, asserted, anonymous;
// empty any), id glob (empty any) and scopes the token must all hold
// (oauth only).
type Principal struct {
	Kind   string   `json:"kind"`
	ID     string   `json:"id"`
	Scopes []string `json:"scopes"`
}

// Default is the policy of a config without "policy": no rules, allow.
func Default() Config {
	return Config{
		Default:   Allow,
		Opaque:    Ask,
		Rules:     []Rule{},
		Approvals: Approvals{ExpireMs: 15 * 60 * 1000, MaxPendingPerConversation: 4, MaxPendingPerPrincipal: 32, MaxPending: 256},
	}
}

// Which tools each matcher is about: their descriptors say.
var (
	commandTools = tooldesc.Targeting(tooldesc.TargetCommand)
	pathTools    = tooldesc.Targeting(tooldesc.TargetPath)
	unitTools    = tooldesc.Targeting(tooldesc.TargetUnit)
	killTools    = tooldesc.Targeting(tooldesc.TargetKill)
)

var principalKinds = []string{"operator", "oauth", "asserted", "anonymous"}

// Validate returns one error per bad value, each naming its key
// (policy.rules[3].commands[0]) and what would be valid, including rules
// that can never match a call.
func (c Config) Validate() []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("policy.%s = %v: %s", key, val, want))
	}
	if c.Default != Allow && c.Default != Ask && c.Default != Deny {
		bad("default", fmt.Sprintf("%q", c.Default), "must be allow, ask or deny")
	}
	if c.Opaque != Ask && c.Opaque != Deny {
		bad("opaque", fmt.Sprintf("%q", c.Opaque), "must be ask or deny (a command the parser cannot see through is never allowed by command rules)")
	}
	a := c.Approvals
	if a.ExpireMs < 1000 || a.ExpireMs > 7*24*3600*1000 {
		bad("approvals.expireMs", a.ExpireMs, "must be 1000..604800000 (1 s to 7 days)")
	}
	if a.MaxPendingPerConversation < 1 || a.MaxPendingPerConversation > 1024 {
		bad("approvals.maxPendingPerConversation", a.MaxPendingPerConversation, "must be 1..1024")
	}
	if a.MaxPendingPerPrincipal < 1 || a.MaxPendingPerPrincipal > 65536 {
		bad("approvals.maxPendingPerPrincipal", a.MaxPendingPerPrincipal, "must be 1..65536 (above maxPending it adds no bound)")
	}
	if a.MaxPending < max(a.MaxPendingPerConversation, 1) || a.MaxPending > 65536 {
		bad("approvals.maxPending", a.MaxPending, fmt.Sprintf("must be %d..65536 (at least maxPendingPerConversation)", max(a.MaxPendingPerConversation, 1)))
	}
	if a.Dir != "" && (!path.IsAbs(a.Dir) || path.Clean(a.Dir) != a.Dir) {
		bad("approvals.dir", fmt.Sprintf("%q", a.Dir), "must be a clean absolute path, or empty for the unit's state directory")
	}
	ids := map[string]int{}
	for i, r := range c.Rules {
		k := fmt.Sprintf("rules[%d]", i)
		switch {
		case !validID(r.ID):
			bad(k+".id", fmt.Sprintf("%q", r.ID), "must be 1..64 characters of letters, digits, '.', '_' and '-', e.g. deny-rm")
		case ids[r.ID] > 0:
			bad(k+".id", fmt.Sprintf("%q", r.ID), fmt.Sprintf("must be unique (rules[%d] has it)", ids[r.ID]-1))
		default:
			ids[r.ID] = i + 1
		}
		if r.Action != Allow && r.Action != Ask && r.Action != Deny {
			bad(k+".action", fmt.Sprintf("%q", r.Action), "must be allow, ask or deny")
		}
		switch {
		case r.Approver != "" && r.Approver != ApproverUser && r.Approver != ApproverOperator:
			bad(k+".approver", fmt.Sprintf("%q", r.Approver), "must be user (the client's user or the operator), operator (the operator only) or empty (user)")
		case r.Approver != "" && r.Action != Ask:
			bad(k+".approver", fmt.Sprintf("%q", r.Approver), "only an ask rule has an approver (this rule's action is "+string(r.Action)+")")
		}
		if len(r.Reason) > 256 || strings.ContainsFunc(r.Reason, isControl) {
			bad(k+".reason", fmt.Sprintf("%q", r.Reason), "must be at most 256 characters without control characters")
		}
		for j, p := range r.Principals {
			pk := fmt.Sprintf("%s.principals[%d]", k, j)
			if p.Kind != "" && !slices.Contains(principalKinds, p.Kind) {
				bad(pk+".kind", fmt.Sprintf("%q", p.Kind), "must be operator, oauth, asserted, anonymous or empty (any)")
			}
			if ip, err := compileID(p.ID); err != nil {
				bad(pk+".id", fmt.Sprintf("%q", p.ID), "must be a glob (* any characters, / included; ?, [...], \\ escapes): "+err.Error())
			} else if why := neverMatches(p.Kind, ip, p.ID); why != "" {
				bad(pk+".id", fmt.Sprintf("%q", p.ID), why)
			}
			if len(p.Scopes) > 0 && p.Kind != "" && p.Kind != "oauth" {
				bad(pk+".scopes", p.Scopes, "can never match: only oauth principals carry scopes (set kind to oauth or leave it empty)")
			}
			if p.Kind == "anonymous" && p.ID != "" && p.ID != "*" {
				bad(pk+".id", fmt.Sprintf("%q", p.ID), `can never match: anonymous principals have no id`)
			}
		}
		errs = append(errs, r.validateMatchers(k)...)
		errs = append(errs, r.validateSandbox(k)...)
	}
	return append(errs, c.checkExamples(len(errs) == 0)...)
}

// validateMatchers checks the argument matchers and that each tool the
// rule names has one that applies to it.
func (r Rule) validateMatchers(k string) []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("policy.%s = %v: %s", key, val, want))
	}
	for j, t := range r.Tools {
		if _, err := path.Match(t, ""); err != nil || len(matchTools(t)) == 0 {
			bad(fmt.Sprintf("%s.tools[%d]", k, j), fmt.Sprintf("%q", t), "can never match: must name a tool or a glob over tool names, one of "+strings.Join(tooldesc.Names(), ", "))
		}
	}
	for j, c := range r.Commands {
		if _, err := compileCommand(c); err != nil {
			bad(fmt.Sprintf("%s.commands[%d]", k, j), fmt.Sprintf("%q", c), err.Error())
		}
	}
	for j, p := range r.Paths {
		if why := filepolicy.ValidPattern(p); why != "" {
			bad(fmt.Sprintf("%s.paths[%d]", k, j), fmt.Sprintf("%q", p), why+", e.g. /etc/** or /var/log")
		}
	}
	for j, u := range r.Units {
		if _, err := path.Match(u, ""); err != nil || u == "" || strings.ContainsFunc(u, isControl) {
			bad(fmt.Sprintf("%s.units[%d]", k, j), fmt.Sprintf("%q", u), "must be a unit name glob such as nginx.service or mcp-*.service")
		}
	}
	for j, s := range r.Signals {
		if _, err := signals.Parse(s); err != nil {
			bad(fmt.Sprintf("%s.signals[%d]", k, j), fmt.Sprintf("%q", s), "must be a signal name (TERM, SIGKILL) or number 0..64, as process.kill reads it")
		}
	}
	for j, p := range r.PIDs {
		if _, _, ok := pidRange(p); !ok {
			bad(fmt.Sprintf("%s.pids[%d]", k, j), fmt.Sprintf("%q", p), "must be a pid or a range LO-HI of pids > 0")
		}
	}
	if len(r.Tools) == 0 {
		return errs
	}
	about := r.matcherTools()
	if about == nil {
		return errs
	}
	for j, t := range r.Tools {
		if !slices.ContainsFunc(matchTools(t), func(n string) bool { return slices.Contains(about, n) }) {
			bad(fmt.Sprintf("%s.tools[%d]", k, j), fmt.Sprintf("%q", t), "can never match: the rule's matchers (commands, paths, units, signals, pids) are about "+strings.Join(about, ", ")+" only")
		}
	}
	return errs
}

// matcherTools lists the tools the rule's matchers are about; nil when it
// has none (then it is about the tool as a whole).
func (r Rule) matcherTools() []string {
	var out []string
	if len(r.Commands) > 0 {
		out = append(out, commandTools...)
	}
	if len(r.Paths) > 0 {
		out = append(out, pathTools...)
	}
	if len(r.Units) > 0 {
		out = append(out, unitTools...)
	}
	if len(r.Signals) > 0 || len(r.PIDs) > 0 {
		out = append(out, killTools...)
	}
	return out
}

func matchTools(glob string) []string {
	var out []string
	for _, n := range tooldesc.Names() {
		if ok, _ := path.Match(glob, n); ok {
			out = append(out, n)
		}
	}
	return out
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// pidRange parses "N" or "LO-HI".
func pidRange(s string) (lo, hi int, ok bool) {
	a, b, isRange := strings.Cut(s, "-")
	lo, err := strconv.Atoi(a)
	if err != nil || lo <= 0 {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, err = strconv.Atoi(b)
	if err != nil || hi < lo {
		return 0, 0, false
	}
	return lo, hi, true
}

// errNever is wrapped by pattern errors that describe a pattern that
// matches nothing.
var errNever = errors.New("can never match")
