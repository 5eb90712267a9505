package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/backend/tooldesc"
)

// Examples are calls a rule must decide (Match) and must not decide
// (NotMatch), checked with the whole policy whenever it is validated
// (check-config, check-policy, the backend's start): a policy file is its
// own test, and a rule that stops matching what it was written for, or
// a later rule that overrides it, is an error naming both.
type Examples struct {
	Match    []Example `json:"match"`
	NotMatch []Example `json:"notMatch"`
}

// Example is one call: a shell command, a path or a unit for the tool the
// rule's matchers are about, or any tool's arguments.
type Example struct {
	// Tool is the call's tool; empty: the first of the rule's tools that
	// takes the example's command, path or unit (else shell.exec,
	// file.read, service.status), or for args the first tool the rule is
	// about (process.kill for signals and pids, else its tools[0]).
	Tool string `json:"tool,omitempty"`
	// Principal is who calls, as check-policy's --principal (KIND[:ID]);
	// empty: the rule's first principal, or anonymous.
	Principal string `json:"principal,omitempty"`
	// Scopes are an OAuth caller's; empty: the rule's first principal's.
	Scopes []string `json:"scopes,omitempty"`
	// Command, Path and Unit are shorthands for Args {"command": ...},
	// {"path": ...}, {"unit": ...}; at most one of the four is given.
	Command string          `json:"command,omitempty"`
	Path    string          `json:"path,omitempty"`
	Unit    string          `json:"unit,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
}

// checkExamples validates every rule's examples and, when the rest of
// the policy is valid (ok), decides each with the policy.
func (c Config) checkExamples(ok bool) []error {
	var errs []error
	type check struct {
		key   string
		rule  Rule
		ex    Example
		match bool
		call  Call
	}
	var checks []check
	for i, r := range c.Rules {
		for _, m := range []struct {
			name  string
			list  []Example
			match bool
		}{{"match", r.Examples.Match, true}, {"notMatch", r.Examples.NotMatch, false}} {
			for j, ex := range m.list {
				key := fmt.Sprintf("rules[%d].examples.%s[%d]", i, m.name, j)
				call, err := ex.call(r)
				if err != nil {
					errs = append(errs, fmt.Errorf("policy.%s = %s: %w", key, ex, err))
					continue
				}
				checks = append(checks, check{key, r, ex, m.match, call})
			}
		}
	}
	if !ok || len(errs) > 0 || len(checks) == 0 {
		return errs
	}
	bare := c
	bare.Rules = make([]Rule, len(c.Rules))
	for i, r := range c.Rules {
		r.Examples = Examples{}
		bare.Rules[i] = r
	}
	p, err := New(bare)
	if err != nil {
		return append(errs, fmt.Errorf("policy: checking examples: %w", err))
	}
	for _, ch := range checks {
		d := p.Decide(ch.call)
		switch {
		case ch.match && d.Rule != ch.rule.ID:
			errs = append(errs, fmt.Errorf("policy.%s = %s: rule %s must decide it, but it gets %s", ch.key, ch.ex, ch.rule.ID, d.Describe()))
		case !ch.match && d.Rule == ch.rule.ID:
			errs = append(errs, fmt.Errorf("policy.%s = %s: rule %s must not decide it, but it does: %s", ch.key, ch.ex, ch.rule.ID, d.Describe()))
		}
	}
	return errs
}

// String is the example as JSON, for errors.
func (e Example) String() string {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Sprintf("%+v", e.Command)
	}
	return string(b)
}

// call builds the call the example stands for, r's defaults filled in.
func (e Example) call(r Rule) (Call, error) {
	var c Call
	given := 0
	for _, s := range []string{e.Command, e.Path, e.Unit, string(e.Args)} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return c, fmt.Errorf("give exactly one of command, path, unit or args")
	}
	c.Tool = e.Tool
	if c.Tool == "" {
		switch {
		case e.Command != "":
			c.Tool = r.exampleTool(commandTools)
		case e.Path != "":
			c.Tool = r.exampleTool(pathTools)
		case e.Unit != "":
			c.Tool = r.exampleTool(unitTools)
		default:
			c.Tool = r.exampleTool(nil)
		}
	}
	if !slices.Contains(tooldesc.Names(), c.Tool) {
		return c, fmt.Errorf("tool %q: name one of %s", c.Tool, strings.Join(tooldesc.Names(), ", "))
	}
	var args any
	switch {
	case e.Command != "":
		args = map[string]string{"command": e.Command}
	case e.Path != "":
		args = map[string]string{"path": e.Path}
	case e.Unit != "":
		args = map[string]string{"unit": e.Unit}
	default:
		var obj map[string]any
		if json.Unmarshal(e.Args, &obj) != nil || obj == nil {
			return c, fmt.Errorf("args must be a JSON object, e.g. {\"pid\": 1, \"signal\": \"KILL\"}")
		}
		args = obj
	}
	b, err := json.Marshal(args)
	if err != nil {
		return c, err
	}
	c.Args = b
	c.Scopes = e.Scopes
	if e.Principal == "" {
		c.PrincipalKind = "anonymous"
		if len(r.Principals) > 0 {
			p := r.Principals[0]
			c.PrincipalKind, c.PrincipalID = p.Kind, strings.NewReplacer("*", "", "?", "x").Replace(p.ID)
			if c.PrincipalKind == "" {
				c.PrincipalKind = "oauth"
			}
			if c.Scopes == nil {
				c.Scopes = p.Scopes
			}
		}
	} else {
		kind, id, _ := strings.Cut(e.Principal, ":")
		if !slices.Contains(principalKinds, kind) {
			return c, fmt.Errorf("principal %q: want operator, oauth:ISSUER SUBJECT, asserted:ID or anonymous", e.Principal)
		}
		c.PrincipalKind, c.PrincipalID = kind, id
	}
	if c.PrincipalKind == "operator" && c.PrincipalID == "" {
		c.PrincipalID = "operator" // as check-policy and the server name it
	}
	return c, nil
}

// exampleTool is the tool an example without one calls: the first of
// the rule's tools that takes the example's argument (kind), else the
// first tool of that kind; for an args example, the first tool the rule
// is about.
func (r Rule) exampleTool(kind []string) string {
	about := r.matcherTools()
	if kind == nil {
		kind = tooldesc.Names()
	}
	for _, t := range r.Tools {
		for _, n := range matchTools(t) {
			if slices.Contains(kind, n) && (about == nil || slices.Contains(about, n)) {
				return n
			}
		}
	}
	for _, n := range about {
		if slices.Contains(kind, n) {
			return n
		}
	}
	if len(kind) > 0 && len(kind) < len(tooldesc.Names()) {
		return kind[0]
	}
	return ""
}
