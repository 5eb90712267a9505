// Package oauth makes mcp-backend an OAuth 2.1 protected resource: it
// publishes RFC 9728 metadata naming the authorization server, validates
// JWT access tokens against that server's public keys (discovered, cached,
// refreshed on an unknown kid at a bounded rate), maps the token's scopes to
// the tools it may call, and answers refusals with the WWW-Authenticate
// challenges MCP clients discover from. It never issues tokens.
package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/overdeck/mcp-backend/backend/config"
)

// Defaults of Options' zero fields.
const (
	DefaultLeeway       = 30 * time.Second // clock skew tolerated on exp, nbf and iat
	DefaultMinRefresh   = 30 * time.Second // at most one key fetch per this on unknown kids
	DefaultRefreshEvery = time.Hour        // background refresh, so removed keys go
)

// Options configure a Verifier; zero fields get the defaults.
type Options struct {
	Config       config.OAuth
	HTTPClient   *http.Client // for discovery and JWKS; nil: a client without proxy
	Logger       *slog.Logger
	Leeway       time.Duration
	MinRefresh   time.Duration
	RefreshEvery time.Duration
	Now          func() time.Time // the clock tokens are judged by
}

// Verifier validates access tokens for the configured resources and knows
// which tools each scope grants.
type Verifier struct {
	issuer    string
	subject   string // auth.oauth.subjectClaim
	resources []resource
	policy    policy
	leeway    time.Duration
	every     time.Duration
	now       func() time.Time
	log       *slog.Logger
	keys      *keyCache
}

// resource is one configured resource URL, split for matching by Host.
type resource struct {
	id   string // the URL, as configured and as tokens carry it in aud
	host string // lower-case host[:port] of the URL
	meta string // its RFC 9728 metadata URL
}

// New checks the configuration and builds a verifier; keys are fetched by
// Run and, on demand, by the first token that needs them.
func New(opts Options) (*Verifier, error) {
	if opts.Leeway <= 0 {
		opts.Leeway = DefaultLeeway
	}
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = DefaultMinRefresh
	}
	if opts.RefreshEvery <= 0 {
		opts.RefreshEvery = DefaultRefreshEvery
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.HTTPClient == nil {
		// No proxy from the environment: the authorization server is
		// named by the operator, and the process runs as root.
		opts.HTTPClient = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: fetchTimeout}
	}
	cfg := opts.Config
	if cfg.Scopes == nil {
		cfg.Scopes = config.DefaultScopes()
	}
	if len(cfg.Resources) == 0 {
		return nil, errors.New("oauth: no resource configured")
	}
	v := &Verifier{
		issuer:  cfg.Issuer,
		subject: cfg.SubjectClaim,
		policy:  newPolicy(cfg.Scopes),
		leeway:  opts.Leeway,
		every:   opts.RefreshEvery,
		now:     opts.Now,
		log:     opts.Logger,
		keys: &keyCache{
			issuer:     cfg.Issuer,
			jwksURL:    cfg.JWKSURL,
			client:     opts.HTTPClient,
			now:        opts.Now,
			minRefresh: opts.MinRefresh,
		},
	}
	for _, r := range cfg.Resources {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("oauth: resource %q is not an absolute URL", r)
		}
		v.resources = append(v.resources, resource{
			id:   r,
			host: hostKey(u.Host),
			meta: u.Scheme + "://" + u.Host + wellKnown + trimSlash(u.Path),
		})
	}
	return v, nil
}

// Run loads the keys at once (retrying with backoff while the authorization
// server is unreachable) and refreshes them every RefreshEvery until ctx
// ends, so that rotated-out keys stop being accepted.
func (v *Verifier) Run(ctx context.Context) {
	backoff := time.Second
	for {
		err := v.keys.refresh(ctx)
		wait := v.every
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			v.log.Warn("oauth: cannot load the issuer's keys; tokens are refused until it works", "issuer", v.issuer, "err", err, "retryIn", backoff.String())
			wait, backoff = backoff, min(2*backoff, 5*time.Minute)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Scopes are the configured scope names, sorted.
func (v *Verifier) Scopes() []string { return slices.Clone(v.policy.names) }

// Identity is who a request acts for: the subject and client of a token,
// or the operator holding the static bearer token.
type Identity struct {
	Subject  string
	ClientID string
	Scopes   []string
	Operator bool // the static bearer token: every tool
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity in ctx, or nil.
func IdentityFrom(ctx context.Context) *Identity {
	id, _ := ctx.Value(identityKey{}).(*Identity)
	return id
}

// extraIdentity is the TokenInfo.Extra key under which the identity
// travels through the MCP SDK to tool middleware.
const extraIdentity = "mcp-backend/identity"

// TokenInfo is the identity as the MCP SDK carries it to request handlers.
func (id *Identity) TokenInfo() *auth.TokenInfo {
	return &auth.TokenInfo{Scopes: id.Scopes, UserID: id.Subject, Extra: map[string]any{extraIdentity: id}}
}

// IdentityOf returns the identity a TokenInfo carries, or nil.
func IdentityOf(ti *auth.TokenInfo) *Identity {
	if ti == nil {
		return nil
	}
	id, _ := ti.Extra[extraIdentity].(*Identity)
	return id
}
