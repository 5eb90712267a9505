package oauth

import (
	"maps"
	"slices"
)

// policy is the scope mapping turned around: for each tool, the scopes
// that grant it.
type policy struct {
	names  []string            // every scope name, sorted
	grants map[string][]string // tool -> scopes granting it, sorted
}

func newPolicy(scopes map[string][]string) policy {
	p := policy{names: slices.Sorted(maps.Keys(scopes)), grants: map[string][]string{}}
	for _, s := range p.names {
		for _, tool := range scopes[s] {
			if !slices.Contains(p.grants[tool], s) {
				p.grants[tool] = append(p.grants[tool], s)
			}
		}
	}
	return p
}

// MayCall reports whether id may call tool: the operator always, a token
// when one of its scopes grants the tool.
func (v *Verifier) MayCall(id *Identity, tool string) bool {
	if id == nil {
		return false
	}
	if id.Operator {
		return true
	}
	for _, s := range v.policy.grants[tool] {
		if slices.Contains(id.Scopes, s) {
			return true
		}
	}
	return false
}

// ScopesFor names the scopes that grant tool (what a client must ask for
// to step up); empty when no scope does.
func (v *Verifier) ScopesFor(tool string) []string { return slices.Clone(v.policy.grants[tool]) }

// Known reports whether id holds at least one configured scope (or is the
// operator): a token that holds none may do nothing here.
func (v *Verifier) Known(id *Identity) bool {
	if id.Operator {
		return true
	}
	for _, s := range id.Scopes {
		if slices.Contains(v.policy.names, s) {
			return true
		}
	}
	return false
}
