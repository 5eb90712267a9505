package policy

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/internal/signals"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Rule ids of decisions no configured rule made.
const (
	RuleDefault = "policy.default" // no rule matched: policy.default
	RuleOpaque  = "policy.opaque"  // the parser cannot see what runs: policy.opaque
)

// Policy is a compiled Config. A nil *Policy allows everything.
type Policy struct {
	cfg       Config
	rules     []*rule
	unitRules bool // a rule matches units: ResolveUnits asks systemd
}

type rule struct {
	Rule
	tools map[string]bool
	cmds  []*cmdPattern
	sigs  []syscall.Signal
	ids   []*idPattern // one per principal; nil: any id
	paths *filepolicy.Patterns
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
			names = tooldesc.Names()
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
		if len(r.Paths) > 0 {
			// files.deny's implementation: hard links included.
			cr.paths = filepolicy.NewPatterns(r.Paths)
		}
		for _, m := range r.Principals {
			var ip *idPattern
			if m.ID != "" {
				var err error
				if ip, err = compileID(m.ID); err != nil {
					return nil, fmt.Errorf("policy: rule %s: %w", r.ID, err)
				}
			}
			cr.ids = append(cr.ids, ip)
		}
		for _, s := range r.Signals {
			sig, err := signals.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("policy: rule %s: %w", r.ID, err)
			}
			cr.sigs = append(cr.sigs, sig)
		}
		p.unitRules = p.unitRules || len(r.Units) > 0
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
	// Units are the names the unit of a service.* call is known by, its
	// own name (systemd's Id) first: ResolveUnits sets them. Empty: the
	// name as sent, with the suffix systemctl adds.
	Units []string
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
	// Parts are the parts of a shell command judged, each with its own
	// decision, for showing the whole command to whoever approves it.
	Parts []mcpwire.JudgedPart `json:"parts,omitempty"`
	// Approver is ApproverOperator when an ask comes from a rule (of any
	// part that asks) only the operator may approve; else empty (user).
	Approver string `json:"approver,omitempty"`
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
	ts := targetsOf(c)
	var out *Decision
	var sandboxes []string
	var parts []mcpwire.JudgedPart
	operator := false // some part asks of the operator only
	for _, t := range ts {
		d, ok := p.judge(rules, cmdRules, t)
		operator = operator || ok && d.Action == Ask && d.Approver == ApproverOperator
		if t.kind == kindCommand {
			parts = append(parts, mcpwire.JudgedPart{Text: t.text, Action: string(d.Action), Rule: d.Rule, Reason: d.Reason})
		}
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
	out.Parts = parts
	if out.Action == Ask && operator {
		out.Approver = ApproverOperator
	}
	return oneSandbox(*out, sandboxes)
}

// target is one thing a call acts on.
type target struct {
	kind  int // 0 the tool as a whole, else one of the kinds below
	part  part
	paths []string          // the path as sent (clean) and as it resolves
	inode *filepolicy.Inode // what the path names, when it exists
	units []string          // the unit's own name first, then its other names
	pid   int
	sig   syscall.Signal // -1: one the tool refuses
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
func targetsOf(c Call) []target {
	tool, raw := c.Tool, c.Args
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
		var st unix.Stat_t
		if unix.Stat(clean, &st) == nil {
			t.inode = filepolicy.InodeOf(&st)
		}
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
		unit, ok := UnitOf(tool, raw)
		if !ok {
			return nil
		}
		// What systemd acts on: the name with systemctl's suffix, its
		// own name and its aliases as resolved.
		t := target{kind: kindUnit, text: unit}
		for _, n := range slices.Concat(c.Units[:min(len(c.Units), 1)], []string{mangleUnit(unit)}, c.Units) {
			if !slices.Contains(t.units, n) {
				t.units = append(t.units, n)
			}
		}
		if t.units[0] != unit {
			t.text = unit + " (" + t.units[0] + ")"
		}
		return []target{t}
	case slices.Contains(killTools, tool):
		var in struct {
			PID    int `json:"pid"`
			Signal any `json:"signal"`
		}
		if json.Unmarshal(raw, &in) != nil {
			return nil
		}
		// The tool's own parser: what a rule matches is what it sends.
		t := target{kind: kindKill, pid: in.PID, sig: -1}
		if sig, err := signals.Parse(in.Signal); err == nil {
			t.sig = sig
			t.text = fmt.Sprintf("pid %d signal %s", in.PID, strings.TrimPrefix(signals.Name(sig), "SIG"))
		} else {
			t.text = fmt.Sprintf("pid %d signal %q", in.PID, fmt.Sprint(in.Signal))
		}
		return []target{t}
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
		d := Decision{Action: r.Action, Rule: r.ID, Reason: r.Reason, Target: t.text, Sandbox: r.Sandbox}
		if r.Approver == ApproverOperator {
			d.Approver = ApproverOperator
		}
		return d
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
	for i, m := range r.Principals {
		if m.Kind != "" && m.Kind != c.PrincipalKind {
			continue
		}
		if r.ids[i] != nil && !r.ids[i].match(c.PrincipalID) {
			continue
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
		if r.paths == nil {
			return false
		}
		// A deny or ask rule covers a hard link to what it names too; an
		// allow rule goes by the path alone.
		st := t.inode
		if !loose {
			st = nil
		}
		matched := 0
		for _, p := range t.paths {
			if r.paths.Covers(p, st) >= 0 {
				matched++
			}
		}
		return loose && matched > 0 || matched == len(t.paths)
	case kindUnit:
		names := t.unitNames(loose)
		return slices.ContainsFunc(r.Units, func(g string) bool {
			return slices.ContainsFunc(names, func(n string) bool { ok, _ := path.Match(g, n); return ok })
		})
	case kindKill:
		if len(r.Signals) == 0 && len(r.PIDs) == 0 {
			return false
		}
		if len(r.Signals) > 0 && !slices.Contains(r.sigs, t.sig) {
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
