package policy

import (
	"fmt"
	"regexp"
	"strings"
)

// A principal id pattern is a glob over the whole id. An id is no path
// ("https://auth.example.com google-oauth2/1234", "spiffe://corp/ci"), so
// "/" is an ordinary character: "*" matches any run of characters, "/"
// and spaces included ("**" is the same), "?" any one character, "[...]"
// one of a class ("[!...]" or "[^...]" none of it), and "\" makes the
// next character literal.
type idPattern struct {
	re *regexp.Regexp
}

func compileID(src string) (*idPattern, error) {
	re, err := globRegexp(src, ".*", ".*", true)
	if err != nil {
		return nil, err
	}
	return &idPattern{re: re}, nil
}

func (p *idPattern) match(id string) bool { return p.re.MatchString(id) }

// literalPrefix is what every id the pattern matches begins with: the
// pattern up to its first wildcard, escapes resolved.
func literalPrefix(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '*', '?', '[':
			return b.String()
		case '\\':
			if i+1 < len(src) {
				i++
				b.WriteByte(src[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// neverMatches says why a principal pattern can match no id its kind
// has ("" when it can): the operator's id is "operator", an OAuth id is
// "ISSUER SUBJECT".
func neverMatches(kind string, p *idPattern, src string) string {
	switch kind {
	case "operator":
		if !p.match("operator") {
			return `can never match: the operator's id is "operator"`
		}
	case "oauth":
		if !strings.ContainsAny(src, "*?[ ") {
			return `can never match: an OAuth principal's id is "ISSUER SUBJECT" (the issuer, a space, the token's subject), e.g. "https://auth.example.com *"`
		}
	}
	return ""
}

// ValidateIssuer checks the OAuth principals of the rules against the
// configured issuer: an OAuth id begins with it and a space, so a
// pattern whose literal start says otherwise can never match. It returns
// one error per such pattern, naming its key.
func (c Config) ValidateIssuer(issuer string) []error {
	var errs []error
	want := issuer + " "
	for i, r := range c.Rules {
		for j, p := range r.Principals {
			if p.Kind != "oauth" || p.ID == "" {
				continue
			}
			pre := literalPrefix(p.ID)
			if !strings.HasPrefix(want, pre) && !strings.HasPrefix(pre, want) {
				errs = append(errs, fmt.Errorf("policy.rules[%d].principals[%d].id = %q: can never match: an OAuth principal's id begins with the issuer and a space (auth.oauth.issuer %q), e.g. %q", i, j, p.ID, issuer, want+"*"))
			}
		}
	}
	return errs
}
