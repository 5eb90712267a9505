package config

import (
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/overdeck/mcp-backend/backend/tooldesc"
)

// OAuth makes /mcp an OAuth 2.1 protected resource: JWT access tokens of
// one authorization server, for one of the resource URLs (one per tunnel,
// since each tunnel is its own public URL), with scopes mapped to tools.
type OAuth struct {
	// Issuer is the authorization server's issuer identifier; its
	// metadata (RFC 8414, or OpenID configuration) names the JWKS.
	Issuer string `json:"issuer"`
	// JWKSURL, when set, is used instead of the one discovery names.
	JWKSURL string `json:"jwksUrl"`
	// Resources are the URLs clients reach /mcp by, e.g.
	// https://mcp.example.com/mcp; a token's aud must hold one of them.
	Resources []string `json:"resources"`
	// Scopes maps each scope name to the tools it grants. Absent: the
	// defaults of DefaultScopes.
	Scopes map[string][]string `json:"scopes"`
	// SubjectClaim names the claim that says who a token acts for when it
	// has no sub and no client_id or azp (e.g. "email", "oid"). Empty:
	// such a token is refused, never anonymous.
	SubjectClaim string `json:"subjectClaim,omitempty"`
}

// DefaultScopes is the scope mapping of a config that sets none: each
// tool's descriptor names the scope that grants it.
func DefaultScopes() map[string][]string { return tooldesc.DefaultScopes() }

// notSubjects are claims that never say who a token acts for: the ones
// already read (sub, client_id, azp), those about the token itself, and
// its scopes.
var notSubjects = []string{"sub", "client_id", "azp", "iss", "aud", "exp", "nbf", "iat", "jti", "scope", "scp"}

// validate returns one error per bad auth.oauth value.
func (o *OAuth) validate() []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("%s = %v: %s", key, val, want))
	}
	if why := checkURL(o.Issuer); why != "" {
		bad("auth.oauth.issuer", fmt.Sprintf("%q", o.Issuer), why+", e.g. https://auth.example.com")
	}
	if o.JWKSURL != "" {
		if why := checkURL(o.JWKSURL); why != "" {
			bad("auth.oauth.jwksUrl", fmt.Sprintf("%q", o.JWKSURL), why+", or absent to discover it from the issuer")
		}
	}
	if len(o.Resources) == 0 {
		bad("auth.oauth.resources", "[]", "must name at least one resource URL, the public URL of /mcp through each tunnel, e.g. https://mcp.example.com/mcp")
	}
	for i, r := range o.Resources {
		key := fmt.Sprintf("auth.oauth.resources[%d]", i)
		if why := checkURL(r); why != "" {
			bad(key, fmt.Sprintf("%q", r), why+", e.g. https://mcp.example.com/mcp")
		} else if slices.Index(o.Resources, r) != i {
			bad(key, fmt.Sprintf("%q", r), "is listed twice")
		}
	}
	if len(o.Scopes) == 0 {
		bad("auth.oauth.scopes", "{}", `must map at least one scope to tools, e.g. {"mcp:read":["system.info"]}, or be absent for the defaults`)
	}
	if c := o.SubjectClaim; c != "" {
		switch {
		case len(c) > 64 || strings.ContainsFunc(c, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r > '~' }):
			bad("auth.oauth.subjectClaim", fmt.Sprintf("%q", c), "must be a claim name of 1..64 printable ASCII characters without spaces, quotes or backslashes, e.g. email")
		case slices.Contains(notSubjects, c):
			bad("auth.oauth.subjectClaim", fmt.Sprintf("%q", c), "must name a claim that says who the token acts for, not one of "+strings.Join(notSubjects, ", "))
		}
	}
	known := tooldesc.Names()
	for _, name := range slices.Sorted(maps.Keys(o.Scopes)) {
		key := fmt.Sprintf("auth.oauth.scopes[%q]", name)
		if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '"' || r == '\\' || r > '~' }) {
			bad(key, fmt.Sprintf("%q", name), "a scope name must be printable ASCII without spaces, quotes or backslashes")
		}
		for _, tool := range o.Scopes[name] {
			if !slices.Contains(known, tool) {
				bad(key, fmt.Sprintf("%q", tool), "is not a tool; valid: "+strings.Join(known, ", "))
			}
		}
	}
	return errs
}

// checkURL returns why u is not an absolute https URL (http only on a
// loopback host, for tests and for a server on the same machine), or "".
func checkURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.Opaque != "" {
		return "must be an absolute URL"
	}
	if p.Fragment != "" || p.RawQuery != "" || p.User != nil {
		return "must have no query, fragment or user info"
	}
	switch p.Scheme {
	case "https":
		return ""
	case "http":
		if h := p.Hostname(); h == "localhost" || isLoopbackIP(h) {
			return ""
		}
		return "must be https (http only on a loopback host)"
	}
	return "must be https"
}

func isLoopbackIP(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}
