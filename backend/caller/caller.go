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
//
// Wherever a caller is shown without being named (/metrics, log lines,
// audit conversations) it is a pseudonym: 64 bits of HMAC-SHA256 under a
// per-host secret (Keys), so a dictionary of guessed subjects or session
// ids tells an onlooker nothing, while the same caller keeps the same
// pseudonym across restarts and in every place it appears.
package caller

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

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
func (p Principal) Key() string {
	if p.Kind == Anonymous && p.ID == "" {
		return "anonymous:" // the common unauthenticated case, without allocating
	}
	return string(p.Kind) + ":" + p.ID
}

// Verified reports whether the server checked who this is.
func (p Principal) Verified() bool { return p.Kind == Operator || p.Kind == OAuth }

// Caller is who a call acts for.
type Caller struct {
	Principal Principal
	// PrincipalHash is the principal's pseudonym (Keys.Principal): what
	// /metrics, log lines and admission's flow table name it by.
	PrincipalHash string
	// ClientID is the OAuth client the token was issued to, for logs and
	// audit; it does not split the principal's share.
	ClientID string
	// Conversation is a pseudonym (keyed hash) of the raw conversation id: raw ids (session
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

// Resolve turns a call's claims into its Caller, with pseudonyms under a
// key of this process only (tests, tools that keep no pseudonym); the
// server resolves with its host's Keys.
func Resolve(c Claims) Caller { return processKeys.Resolve(c) }

// Resolve turns a call's claims into its Caller, its pseudonyms keyed by k.
func (k *Keys) Resolve(c Claims) Caller {
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
		out.Conversation, out.ConversationFrom = k.hash(FromMetaSession, c.MetaSession), FromMetaSession
	case c.SessionID != "":
		out.Conversation, out.ConversationFrom = k.hash(FromSessionID, c.SessionID), FromSessionID
	default:
		out.Conversation, out.ConversationFrom = FromDefault, FromDefault
	}
	switch out.Principal.Kind {
	case Anonymous:
		out.PrincipalHash = k.anonymous
	case Operator:
		out.PrincipalHash = k.operator
	default:
		out.PrincipalHash = k.Principal(out.Principal)
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

// KeyBytes is the length of a pseudonym key.
const KeyBytes = 32

// KeyFile is the key's file name in the backend's state directory.
const KeyFile = "pseudonym.key"

// Keys derives pseudonyms under one secret key.
type Keys struct {
	key []byte
	// Every call is resolved (twice: the intake and the middleware), so
	// a pseudonym costs no allocation but its string: the keyed hashes
	// are reused, and the principals with a fixed id are hashed once.
	macs                sync.Pool // *mac
	anonymous, operator string
	// seen remembers recent pseudonyms by their hashed input: a caller
	// seen again (every call of a conversation, of a principal) costs a
	// map lookup instead of an HMAC and its string. Bounded by
	// seenEntries; emptied when full.
	seenMu sync.RWMutex
	seen   map[string]string
}

// seenEntries bounds Keys.seen: at most seenEntries inputs of at most
// seenInputBytes each (a longer input is hashed every time).
const (
	seenEntries    = 2048
	seenInputBytes = 2*MaxIDBytes + 32
)

// mac is a keyed HMAC-SHA256 and the buffers one pseudonym needs.
type mac struct {
	h   hash.Hash
	in  []byte
	sum []byte
}

func newKeys(key []byte) *Keys {
	k := &Keys{key: key, seen: make(map[string]string)}
	k.macs.New = func() any {
		return &mac{h: hmac.New(sha256.New, k.key), sum: make([]byte, 0, sha256.Size)}
	}
	k.anonymous = k.Principal(Principal{Kind: Anonymous})
	k.operator = k.Principal(Principal{Kind: Operator, ID: "operator"})
	return k
}

// NewKeys returns pseudonyms under key (KeyBytes long).
func NewKeys(key []byte) (*Keys, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("pseudonym key: %d bytes, want %d", len(key), KeyBytes)
	}
	return newKeys(append([]byte(nil), key...)), nil
}

// EphemeralKeys are pseudonyms under a fresh random key: stable only as
// long as the process lives.
func EphemeralKeys() *Keys {
	k := make([]byte, KeyBytes)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return newKeys(k)
}

var processKeys = EphemeralKeys()

// Principal is p's pseudonym: the hash of its Key.
func (k *Keys) Principal(p Principal) string { return k.hash("principal", string(p.Kind), ":", p.ID) }

// hash is 64 bits of HMAC-SHA256 over a domain and an id (the
// concatenation of parts): enough to tell flows apart in a table of
// thousands, and, without the key, no way to test a guess.
func (k *Keys) hash(domain string, id ...string) string {
	m := k.macs.Get().(*mac)
	in := append(append(m.in[:0], domain...), 0)
	for _, s := range id {
		in = append(in, s...)
	}
	keep := len(in) <= seenInputBytes
	if keep {
		k.seenMu.RLock()
		p, ok := k.seen[string(in)] // no copy: the compiler looks up the bytes
		k.seenMu.RUnlock()
		if ok {
			m.in = in
			k.macs.Put(m)
			return p
		}
	}
	m.h.Reset()
	m.h.Write(in)
	m.sum = m.h.Sum(m.sum[:0])
	var out [16]byte
	hex.Encode(out[:], m.sum[:8])
	if !keep {
		if cap(in) <= 4*MaxIDBytes { // a rare huge id is not kept
			m.in = in
		}
		k.macs.Put(m)
		return string(out[:])
	}
	// One allocation holds both the remembered input and its pseudonym.
	n := len(in)
	in = append(in, out[:]...)
	both := string(in)
	in = in[:n]
	p := both[n:]
	k.seenMu.Lock()
	if len(k.seen) >= seenEntries {
		clear(k.seen)
	}
	k.seen[both[:n]] = p
	k.seenMu.Unlock()
	m.in = in
	k.macs.Put(m)
	return p
}

// LoadKeys reads the key at path, creating it (KeyBytes random bytes,
// mode 0600) when it does not exist yet. Two processes starting at once
// agree: the file appears whole or not at all (a hard link of a written
// temporary file), and the loser reads the winner's.
func LoadKeys(path string) (*Keys, error) {
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			fi, err := os.Stat(path)
			if err != nil {
				return nil, fmt.Errorf("pseudonym key: %w", err)
			}
			if fi.Mode().Perm()&0o077 != 0 {
				return nil, fmt.Errorf("pseudonym key %s: mode %v, want owner-only (0600)", path, fi.Mode().Perm())
			}
			return NewKeys(b)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("pseudonym key: %w", err)
		}
		if err := createKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("pseudonym key %s: created but not readable", path)
}

func createKey(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pseudonym key: %w", err)
	}
	defer os.Remove(tmp.Name())
	key := make([]byte, KeyBytes)
	_, _ = rand.Read(key)
	// CreateTemp makes the file 0600.
	_, err = tmp.Write(key)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pseudonym key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("pseudonym key: %w", err)
	}
	return nil
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
