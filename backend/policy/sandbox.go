package policy

import (
	"fmt"
	"slices"
	"strings"
)

// RuleSandbox is the rule id of an allowed command whose parts their
// rules would run in different sandboxes: it runs only once approved.
const RuleSandbox = "policy.sandbox"

// oneSandbox settles the sandbox of an allowed command: a command runs in
// one sandbox, so its parts' rules must agree on it (a rule that names
// none stands for the default). Parts that disagree make the call an ask:
// running all of it in the laxer profile would hand one part what only
// the other's rule allowed.
func oneSandbox(d Decision, parts []string) Decision {
	if d.Action != Allow || len(parts) < 2 {
		return d
	}
	names := slices.Clone(parts)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 1 {
		d.Sandbox = names[0]
		return d
	}
	for i, n := range names {
		if n == "" {
			names[i] = "(default)"
		}
	}
	return Decision{
		Action: Ask,
		Rule:   RuleSandbox,
		Reason: fmt.Sprintf("its parts' rules run them in different sandboxes (%s): run them as separate calls, or approve it to run in sandbox.approved", strings.Join(names, ", ")),
		Target: d.Target,
		Parts:  d.Parts,
	}
}

// validateSandbox checks the rule's sandbox name (that the profile
// exists is the backend config's check: it holds the profiles).
func (r Rule) validateSandbox(k string) []error {
	if r.Sandbox == "" {
		return nil
	}
	switch {
	case !validID(r.Sandbox):
		return []error{fmt.Errorf("policy.%s.sandbox = %q: must name a profile such as inspect or root", k, r.Sandbox)}
	case r.Action == Deny:
		return []error{fmt.Errorf("policy.%s.sandbox = %q: a deny rule runs nothing: name the sandbox on an allow or ask rule", k, r.Sandbox)}
	case r.Sandbox == "none":
		return []error{fmt.Errorf("policy.%s.sandbox = %q: a rule names a profile (none is only a default)", k, r.Sandbox)}
	}
	return nil
}

// Sandboxes lists the profiles the rules name, each once, with the key
// of the first rule that names it.
func (c Config) Sandboxes() map[string]string {
	out := map[string]string{}
	for i, r := range c.Rules {
		if _, ok := out[r.Sandbox]; r.Sandbox != "" && !ok {
			out[r.Sandbox] = fmt.Sprintf("policy.rules[%d].sandbox", i)
		}
	}
	return out
}

// DenyPaths lists the paths of deny rules (each pattern once), with the
// key of the first rule that names it: what the sandbox masks.
func (c Config) DenyPaths() (paths, keys []string) {
	for i, r := range c.Rules {
		if r.Action != Deny {
			continue
		}
		for j, p := range r.Paths {
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
				keys = append(keys, fmt.Sprintf("policy.rules[%d].paths[%d]", i, j))
			}
		}
	}
	return paths, keys
}
