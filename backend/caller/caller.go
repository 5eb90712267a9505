// Package caller names who a tool call acts for: the principal (the
// verified caller, or what an unauthenticated client asserts about itself)
// and the conversation within that principal. Fair share (admission), jobs
// and audit all key on the same Caller, resolved once per call from the
// same bytes the call was dispatched from.
//
// Client-asserted ids (the openai/* keys of a call's _meta, the
// Mcp-Session-Id header) only ever split the asserting principal's own
// share: where the principal is verified (the operator's bearer, an OAuth
// token), minting conversations gains a caller nothing. With no
// authentication there is nothing to verify, and openai/subject is taken as
// the principal as the client states it.
package caller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// The _meta keys ChatGPT sends with every tools/call: an anonymised
// conversation and an anonymised user (meant for rate limiting).
const (
	MetaSession = mcpwire.MetaSession
	MetaSubject = mcpwire.MetaSubject
)

// Kind is how a principal is known.
type Kind string

const (
	// Operator is the static bearer token of auth.bearerTokenFile.
	Operator Kind = "operator"
	// OAuth is a verified JWT access token: the issuer's subject.
	OAuth Kind = "oauth"
	// Asserted is an unauthenticated client's own openai/subject.
	Asserted Kind = "asserted"
	// Anonymous is every unauthenticated call that asserts no subject.
	Anonymous Kind = "anonymous"
)

// Where a conversation id came from.
const (
	FromMetaSession = "openai/session"
	FromSessionID   = "mcp-session-id"
	FromDefault     = "default"
)

// MaxIDBytes bounds an id kept as it is; a longer one is kept as its hash,
// so no client makes the flow table hold large keys.
const MaxIDBytes = 128

// Principal is one caller whose share the fair-share scheduler protects.
type Principal struct {
	Kind Kind
	// ID is the principal within its kind: "operator"; the OAuth issuer and
	// subject ("ISSUER SUBJECT"); the asserted subject; "" when anonymous.
	// Never a secret; at most MaxIDBytes (longer ids become "sha256:HEX").
	ID string
}

// Key is the principal's identity as one string: equal keys, one share.
func (p Principal) Key() string { return string(p.Kind) + ":" + p.ID }

// Verified reports whether the server checked who this is.
func (p Principal) Verified() bool { return p.Kind == Operator || p.Kind == OAuth }

// Hash is a short stable pseudonym of the principal for /metrics, where ids
// are never shown.
func (p Principal) Hash() string { return shortHash("principal", p.Key()) }

// Caller is who a call acts for.
type Caller struct {
	Principal Principal
	// ClientID is the OAuth client the token was issued to, for logs and
	// audit; it does not split the principal's share.
	ClientID string
	// Conversation is a hash of the raw conversation id: raw ids (session
	// ids scope cancellation) are never exported or logged.
	Conversation string
	// ConversationFrom says where the id came from (FromMetaSession,
	// FromSessionID, FromDefault).
	ConversationFrom string
}

// Claims are the raw facts a call carries, before resolution.
type Claims struct {
	// Operator: the request carried the static bearer token.
	Operator bool
	// Issuer and Subject of a verified OAuth token ("" when none);
	// ClientID is its client.
	Issuer, Subject, ClientID string
	// Authenticated: auth is on for this transport (then an unverified
	// request never gets here, and asserted subjects are ignored).
	Authenticated bool
	// MetaSubject and MetaSession are _meta["openai/subject"] and
	// _meta["openai/session"] as the client sent them.
	MetaSubject, MetaSession string
	// SessionID is the Mcp-Session-Id header.
	SessionID string
}

// Resolve turns a call's claims into its Caller.
func Resolve(c Claims) Caller {
	var out Caller
	switch {
	case c.Operator:
		out.Principal = Principal{Kind: Operator, ID: "operator"}
	case c.Subject != "" || c.ClientID != "":
		sub := c.Subject
		if sub == "" {
			sub = c.ClientID // a client-credentials token acts for its client
		}
		out.Principal = Principal{Kind: OAuth, ID: bound(c.Issuer + " " + sub)}
		out.ClientID = bound(c.ClientID)
	case !c.Authenticated && c.MetaSubject != "":
		out.Principal = Principal{Kind: Asserted, ID: bound(c.MetaSubject)}
	default:
		out.Principal = Principal{Kind: Anonymous}
	}
	switch {
	case c.MetaSession != "":
		out.Conversation, out.ConversationFrom = shortHash(FromMetaSession, c.MetaSession), FromMetaSession
	case c.SessionID != "":
		out.Conversation, out.ConversationFrom = shortHash(FromSessionID, c.SessionID), FromSessionID
	default:
		out.Conversation, out.ConversationFrom = FromDefault, FromDefault
	}
	return out
}

// bound keeps an id at most MaxIDBytes long.
func bound(id string) string {
	if len(id) <= MaxIDBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// shortHash is 64 bits of SHA-256 over a domain and an id: enough to tell
// flows apart in a table of thousands, and not reversible for the random
// ids it is used on.
func shortHash(domain, id string) string {
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write([]byte{0})
	h.Write([]byte(id))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

type ctxKey struct{}

// With returns ctx carrying c: the server resolves a call's Caller once and
// every layer below (admission, tools, audit) reads it from the context.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the Caller in ctx, and false when none was resolved.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}
