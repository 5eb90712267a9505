package oauth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// signatureAlgs are the algorithms a token may be signed with: asymmetric
// only. "none" is never accepted by the library, and HS* would let anyone
// holding the published public key sign ("HS256 with the public key").
var signatureAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// TokenError is why a token was refused; Description is safe to send back
// (it never holds the token).
type TokenError struct{ Description string }

func (e *TokenError) Error() string { return "invalid token: " + e.Description }

func refuse(format string, args ...any) error {
	return &TokenError{Description: fmt.Sprintf(format, args...)}
}

// accessClaims are the claims read from an access token besides the
// registered ones (RFC 9068; "scp" and "azp" as some servers name them).
type accessClaims struct {
	Scope    string   `json:"scope"`
	Scp      []string `json:"scp"`
	ClientID string   `json:"client_id"`
	AZP      string   `json:"azp"`
}

// Verify checks a JWT access token: signature by a key of the issuer with
// an asymmetric algorithm, iss, aud holding one of the configured
// resources, exp (required), nbf and iat, each with the leeway. Errors
// other than a failing key fetch are *TokenError.
func (v *Verifier) Verify(ctx context.Context, token string) (*Identity, error) {
	tok, err := jwt.ParseSigned(token, signatureAlgs)
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return nil, refuse("signature algorithm %q not accepted (asymmetric algorithms only)", string(alg.Got))
		}
		return nil, refuse("not a signed JWT")
	}
	if len(tok.Headers) != 1 {
		return nil, refuse("want exactly one signature")
	}
	h := tok.Headers[0]
	keys, err := v.keys.lookup(ctx, h.KeyID)
	if err != nil {
		if errors.Is(err, errUnknownKey) {
			return nil, refuse("unknown signing key %q", h.KeyID)
		}
		return nil, err
	}
	var (
		std    jwt.Claims
		extra  accessClaims
		named  map[string]any // every claim, when one names the subject
		signed bool
	)
	dest := []any{&std, &extra}
	if v.subject != "" {
		dest = append(dest, &named)
	}
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue // the key is published for another algorithm
		}
		if tok.Claims(k.Key, dest...) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return nil, refuse("bad signature")
	}
	if std.Expiry == nil {
		return nil, refuse("no exp claim")
	}
	if std.Issuer != v.issuer {
		return nil, refuse("issuer %q is not the configured one", std.Issuer)
	}
	if !v.audienceOK(std.Audience) {
		return nil, refuse("audience %q holds none of this server's resources", []string(std.Audience))
	}
	err = std.ValidateWithLeeway(jwt.Expected{Time: v.now()}, v.leeway)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return nil, refuse("expired")
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, refuse("not valid yet")
	case err != nil:
		return nil, refuse("%v", err)
	}
	id := &Identity{Subject: std.Subject, ClientID: extra.ClientID}
	if id.ClientID == "" {
		id.ClientID = extra.AZP
	}
	if id.Subject == "" && id.ClientID == "" {
		// Nobody named: never anonymous, which rules on oauth callers
		// would not see and which every such token would share.
		if v.subject == "" {
			return nil, refuse("no sub claim, and no client_id or azp: the token names no one (auth.oauth.subjectClaim can name a claim to use instead)")
		}
		s, _ := named[v.subject].(string)
		if s == "" {
			return nil, refuse("no sub claim, no client_id or azp, and no %q claim (auth.oauth.subjectClaim) as a string", v.subject)
		}
		// Marked with the claim's name, apart from the issuer's subjects.
		id.Subject = v.subject + ":" + s
	}
	id.Scopes = strings.Fields(extra.Scope)
	if len(id.Scopes) == 0 {
		id.Scopes = extra.Scp
	}
	return id, nil
}

// audienceOK: aud must name one of the configured resources, compared as
// strings except for a trailing slash, which servers add or drop.
func (v *Verifier) audienceOK(aud jwt.Audience) bool {
	for _, a := range aud {
		for _, r := range v.resources {
			if a == r.id || strings.TrimSuffix(a, "/") == strings.TrimSuffix(r.id, "/") {
				return true
			}
		}
	}
	return false
}
