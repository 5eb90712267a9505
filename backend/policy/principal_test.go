package policy

import (
	"strings"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestPrincipalIDGlob: "*" crosses "/" and spaces (an id is no path), "?"
// is one character, classes and escapes work; the whole id must match.
func TestPrincipalIDGlob(t *testing.T) {
	const iss = "https://auth.example.com"
	for _, tc := range []struct {
		pattern, id string
		want        bool
	}{
		{iss + " *", iss + " google-oauth2/1234", true},
		{iss + " *", iss + " spiffe://corp/ci", true},
		{iss + " **", iss + " spiffe://corp/ci", true},
		{iss + " *", "https://evil.example.com alice", false},
		{iss + " google-oauth2/*", iss + " google-oauth2/1234", true},
		{iss + " google-oauth2/*", iss + " github/1234", false},
		{"*", "operator", true},
		{"*", "", true},
		{"spiffe://corp/*", "spiffe://corp/ci/deploy", true},
		{"spiffe://corp/?i", "spiffe://corp/ci", true},
		{"user-[0-9]", "user-7", true},
		{"user-[!0-9]", "user-7", false},
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{"alice", "alice-2", false},
		{"alice", "x alice", false},
	} {
		p, err := compileID(tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		if got := p.match(tc.id); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pattern, tc.id, got, tc.want)
		}
	}
}

// TestPrincipalPatternsThatNeverMatch: check-config refuses an id pattern
// no id of its kind can have, naming the key.
func TestPrincipalPatternsThatNeverMatch(t *testing.T) {
	const iss = "https://auth.example.com"
	rule := func(kind, id string) Config {
		return cfgOf(Allow, Rule{ID: "r", Action: Deny, Tools: []string{mcpwire.ToolShellExec}, Principals: []Principal{{Kind: kind, ID: id}}})
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		issuer string // "" without auth.oauth
		want   string // "" valid
	}{
		{"oauth without the issuer", rule("oauth", "alice"), "", `principals[0].id = "alice": can never match: an OAuth principal's id is "ISSUER SUBJECT"`},
		{"oauth of another issuer", rule("oauth", "https://other.example.com *"), iss, `principals[0].id = "https://other.example.com *": can never match`},
		{"oauth issuer without its slash", rule("oauth", "https://auth.example.com/ *"), iss, "can never match"},
		{"oauth of the issuer", rule("oauth", iss+" *"), iss, ""},
		{"oauth any", rule("oauth", "*"), iss, ""},
		{"oauth by prefix", rule("oauth", "https://auth.*"), iss, ""},
		{"operator by another name", rule("operator", "root"), "", `can never match: the operator's id is "operator"`},
		{"operator", rule("operator", "operator"), "", ""},
		{"asserted anything", rule("asserted", "bob/*"), "", ""},
		{"bad glob", rule("", "a["), "", "must be a glob"},
		{"trailing escape", rule("", `a\`), "", "must be a glob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.cfg.Validate()
			if tc.issuer != "" {
				errs = append(errs, tc.cfg.ValidateIssuer(tc.issuer)...)
			}
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			got := strings.Join(all, "\n")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
