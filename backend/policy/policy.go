package policy

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Rule ids of decisions no configured rule made.
const (
	RuleDefault = "policy.default" // no rule matched: policy.default
	RuleOpaque  = "policy.opaque"  // the parser cannot see what runs: policy.opaque
)

// Policy is a compiled Config. A nil *Policy allows everything.
type Policy struct {
	cfg   Config
	rules []*rule
}

type rule struct {
	Rule
	tools map[string]bool
	cmds  []*cmdPattern
}

// New compiles a validated config; it returns nil (allow everything
// without looking) when there are no rules and the default is allow.
func New(c Config) (*Policy, error) {
	if errs := c.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("policy: %w", errs[0])
	}
	if len(c.Rules) == 0 && c.Default == Allow {
		return nil, nil
	}
	p := &Policy{cfg: c}
	for _, r := range c.Rules {
		cr := &rule{Rule: r, tools: map[string]bool{}}
		names := r.matcherTools()
		if len(r.Tools) > 0 {
			names = nil
			for _, t := range r.Tools {
				names = append(names, matchTools(t)...)
			}
		}
		if names == nil {
			names = mcpwire.ToolNames()
		}
		about := r.matcherTools()
		for _, n := range names {
			if about == nil || slices.Contains(about, n) {
				cr.tools[n] = true
			}
		}
		for _, s := range r.Commands {
			cp, err := compileCommand(s)
			if err != nil {
				return nil, fmt.Errorf("policy: rule %s: %w", r.ID, err)
			}
			cr.cmds = append(cr.cmds, cp)
		}
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

// Config returns the config p was compiled from.
func (p *Policy) Config() Config {
	if p == nil {
		return Default()
	}
	return p.cfg
}

// Call is what Decide looks at.
type Call struct {
	// PrincipalKind and PrincipalID are the caller's (backend/caller).
	PrincipalKind string
	PrincipalID   string
	// Scopes are the OAuth token's scopes (none for other kinds).
	Scopes []string
	Tool   string
	// Args are the call's arguments as the client sent them.
	Args json.RawMessage
}

// Decision is what a call gets and why.
type Decision struct {
	Action Action `json:"action"`
	// Rule is the id of the rule that decided, or RuleDefault, RuleOpaque.
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Target is what decided within the call: the command part, the path,
	// the unit ("" when the tool as a whole).
	Target string `json:"target,omitempty"`
	// Sandbox is the profile the deciding rule names ("" when none: the
	// action's default applies, see sandbox.go).
	Sandbox string `json:"sandbox,omitempty"`
}

// Decide returns what c gets. Deny wins over ask over allow, over every
// part of a shell command; a part no rule matches gets the default.
func (p *Policy) Decide(c Call) Decision {
	if p == nil {
		return Decision{Action: Allow, Rule: RuleDefault, Reason: "no policy"}
	}
	var rules []*rule
	cmdRules := false
	for _, r := range p.rules {
		if r.tools[c.Tool] && r.principalMatches(c) {
			rules = append(rules, r)
			cmdRules = cmdRules || len(r.cmds) > 0
		}
	}
	ts := targetsOf(c.Tool, c.Args)
	var out *Decision
	var sandboxes []string
	for _, t := range ts {
		d, ok := p.judge(rules, cmdRules, t)
		if !ok {
			continue
		}
		sandboxes = append(sandboxes, d.Sandbox)
		if out == nil || d.Action.rank() > out.Action.rank() {
			out = &d
		}
		if out.Action == Deny {
			break
		}
	}
	if out == nil {
		d, _ := p.judge(rules, cmdRules, target{})
		out = &d
	}
	return oneSandbox(*out, sandboxes)
}

// target is one thing a call acts on.
type target struct {
	kind  int // 0 the tool as a whole, else one of the kinds below
	part  part
	paths []string // the path as sent (clean) and as it resolves
	unit  string
	pid   int
	sig   string
	text  string
}

const (
	kindCommand = iota + 1
	kindPath
	kindUnit
	kindKill
)

// targetsOf reads what a call acts on from its arguments, decoded as the
// tools decode them (encoding/json, so keys match case-insensitively as
// they do there). Arguments a tool would refuse give no target: the tool
// as a whole is judged, and the tool refuses them.
func targetsOf(tool string, raw json.RawMessage) []target {
	switch {
	case slices.Contains(commandTools, tool):
		var in struct {
			Command string            `json:"command"`
			Env     map[string]string `json:"env"`
		}
		if json.Unmarshal(raw, &in) != nil {
			return nil
		}
		var out []target
		for _, p := range analyse(in.Command, in.Env) {
			out = append(out, target{kind: kindCommand, part: p, text: p.text})
		}
		return out
	case slices.Contains(pathTools, tool):
		var in struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(raw, &in) != nil || !filepath.IsAbs(in.Path) {
			return nil
		}
		clean := filepath.Clean(in.Path)
		t := target{kind: kindPath, paths: []string{clean}, text: clean}
		if r, err := filepath.EvalSymlinks(clean); err == nil && r != clean {
			t.paths = append(t.paths, r)
		} else if err != nil {
			// A file not there yet (file.write): its directory resolved.
			if d, err := filepath.EvalSymlinks(filepath.Dir(clean)); err == nil && d != filepath.Dir(clean) {
				t.paths = append(t.paths, filepath.Join(d, filepath.Base(clean)))
			}
		}
		return []target{t}
	case slices.Contains(unitTools, tool):
		var in struct {
			Unit string `json:"unit"`
		}
		if json.Unmarshal(raw, &in) != nil {
			return nil
		}
		return []target{{kind: kindUnit, unit: in.Unit, text: in.Unit}}
	case slices.Contains(killTools, tool):
		var in struct {
			PID    int `json:"pid"`
			Signal any `json:"signal"`
		}
		if json.Unmarshal(raw, &in) != nil {
			return nil
		}
		sig := "TERM"
		switch v := in.Signal.(type) {
		case string:
			sig = v
		case float64:
			sig = strconv.FormatFloat(v, 'f', -1, 64)
		}
		if n, ok := signalOf(sig); ok {
			sig = n
		}
		return []target{{kind: kindKill, pid: in.PID, sig: sig, text: fmt.Sprintf("pid %d signal %s", in.PID, sig)}}
	}
	return nil
}

// judge decides one target; ok is false for a wrapper no rule names (the
// command it runs is judged on its own).
func (p *Policy) judge(rules []*rule, cmdRules bool, t target) (Decision, bool) {
	var best *rule
	for _, r := range rules {
		if (best == nil || r.Action.rank() > best.Action.rank()) && r.matches(t) {
			best = r
		}
	}
	dec := func(r *rule) Decision {
		return Decision{Action: r.Action, Rule: r.ID, Reason: r.Reason, Target: t.text, Sandbox: r.Sandbox}
	}
	if t.kind == kindCommand && t.part.opaque != "" && cmdRules {
		if best != nil && best.Action.rank() > p.cfg.Opaque.rank() {
			return dec(best), true
		}
		return Decision{Action: p.cfg.Opaque, Rule: RuleOpaque, Reason: t.part.opaque, Target: t.text}, true
	}
	if best != nil {
		return dec(best), true
	}
	if t.kind == kindCommand && t.part.wrapper {
		return Decision{}, false
	}
	reason := "no rule matches"
	if t.kind == kindCommand && t.part.opaque != "" {
		reason = t.part.opaque
	}
	return Decision{Action: p.cfg.Default, Rule: RuleDefault, Reason: reason, Target: t.text}, true
}

func (r *rule) principalMatches(c Call) bool {
	if len(r.Principals) == 0 {
		return true
	}
	for _, m := range r.Principals {
		if m.Kind != "" && m.Kind != c.PrincipalKind {
			continue
		}
		if m.ID != "" {
			if ok, _ := path.Match(m.ID, c.PrincipalID); !ok {
				continue
			}
		}
		if len(m.Scopes) > 0 && (c.PrincipalKind != "oauth" || !containsAll(c.Scopes, m.Scopes)) {
			continue
		}
		return true
	}
	return false
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// matches reports whether r covers t. A deny or ask rule matches loosely:
// a dynamic argument may be anything, and a path matches when the path as
// sent or as it resolves does; an allow rule needs both.
func (r *rule) matches(t target) bool {
	loose := r.Action != Allow
	hasMatchers := len(r.cmds)+len(r.Paths)+len(r.Units)+len(r.Signals)+len(r.PIDs) > 0
	if !hasMatchers {
		return true
	}
	switch t.kind {
	case kindCommand:
		if t.part.name == "" {
			return false
		}
		name := t.part.name
		if !loose {
			name = t.part.path
		}
		for _, c := range r.cmds {
			if c.match(name, t.part.args, loose) {
				return true
			}
		}
	case kindPath:
		if len(r.Paths) == 0 {
			return false
		}
		matched := 0
		for _, p := range t.paths {
			if slices.ContainsFunc(r.Paths, func(g string) bool { return filepolicy.Match(g, p) }) {
				matched++
			}
		}
		return loose && matched > 0 || matched == len(t.paths)
	case kindUnit:
		return slices.ContainsFunc(r.Units, func(g string) bool { ok, _ := path.Match(g, t.unit); return ok })
	case kindKill:
		if len(r.Signals) == 0 && len(r.PIDs) == 0 {
			return false
		}
		if len(r.Signals) > 0 && !slices.ContainsFunc(r.Signals, func(s string) bool { n, _ := signalOf(s); return n == t.sig }) {
			return false
		}
		if len(r.PIDs) > 0 && !slices.ContainsFunc(r.PIDs, func(s string) bool {
			lo, hi, _ := pidRange(s)
			return t.pid >= lo && t.pid <= hi
		}) {
			return false
		}
		return true
	}
	return false
}

// Describe is one line for logs and errors: "deny by rule deny-rm (no
// deleting): rm -rf /tmp/x".
func (d Decision) Describe() string {
	s := string(d.Action) + " by rule " + d.Rule
	if d.Reason != "" {
		s += " (" + d.Reason + ")"
	}
	if d.Target != "" {
		s += ": " + strings.TrimSpace(d.Target)
	}
	return s
}
