package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// maxDocumentBytes bounds a metadata or JWKS document.
const maxDocumentBytes = 1 << 20

// keyCache holds the issuer's public signing keys. It is filled in the
// background and refreshed on an unknown kid at most once per minRefresh,
// so a flood of forged tokens costs the authorization server one fetch per
// interval and the request path nothing more.
type keyCache struct {
	issuer     string
	jwksURL    string // configured; "" means discover
	client     *http.Client
	now        func() time.Time
	minRefresh time.Duration

	mu   sync.RWMutex
	keys []jose.JSONWebKey

	fetchMu    sync.Mutex // one fetch at a time; waiters reuse its result
	lastTry    time.Time  // start of the last fetch, successful or not
	fetches    int        // fetches attempted (for tests and logs)
	discovered string     // jwks_uri found by discovery
}

var errUnknownKey = errors.New("no key of the issuer matches the token's kid")

// lookup returns the keys that may have signed a token with this kid
// (every key when kid is empty), refreshing once, rate-limited, when none
// match.
func (c *keyCache) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	if ks := c.match(kid); len(ks) > 0 {
		return ks, nil
	}
	c.fetchMu.Lock()
	// Concurrent requests queue here; the first fetches, and the rest find
	// the interval not yet over and reuse its result.
	if c.lastTry.IsZero() || c.now().Sub(c.lastTry) >= c.minRefresh {
		// The fetch serves every request queued here and the next interval:
		// the caller that happens to run it leaving (a client giving up)
		// must not fail it for all of them.
		_ = c.fetchLocked(context.WithoutCancel(ctx))
	}
	c.fetchMu.Unlock()
	if ks := c.match(kid); len(ks) > 0 {
		return ks, nil
	}
	return nil, errUnknownKey
}

func (c *keyCache) match(kid string) []jose.JSONWebKey {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if kid == "" {
		return c.keys
	}
	var out []jose.JSONWebKey
	for _, k := range c.keys {
		if k.KeyID == kid {
			out = append(out, k)
		}
	}
	return out
}

// refresh fetches the key set now (the background loop's path).
func (c *keyCache) refresh(ctx context.Context) error {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	return c.fetchLocked(ctx)
}

func (c *keyCache) fetchLocked(ctx context.Context) error {
	c.lastTry = c.now()
	c.fetches++
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	u := c.jwksURL
	if u == "" {
		if c.discovered == "" {
			d, err := discoverJWKS(ctx, c.client, c.issuer)
			if err != nil {
				return err
			}
			c.discovered = d
		}
		u = c.discovered
	}
	// Keys one by one: a set may also hold keys of types this library
	// does not know (encryption keys, newer curves), which must not hide
	// the signing keys beside them.
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := getJSON(ctx, c.client, u, &set); err != nil {
		return fmt.Errorf("jwks: %w", err)
	}
	var all []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) == nil {
			all = append(all, k)
		}
	}
	keys := usableKeys(all)
	if len(keys) == 0 {
		return fmt.Errorf("jwks %s: no public signing key (RSA, EC or Ed25519) among %d keys", u, len(set.Keys))
	}
	c.mu.Lock()
	c.keys = keys
	c.mu.Unlock()
	return nil
}

// usableKeys keeps public asymmetric signing keys: a symmetric ("oct") key
// in a published set would let anyone who read it sign tokens.
func usableKeys(in []jose.JSONWebKey) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range in {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			out = append(out, k)
		}
	}
	return out
}

// fetchTimeout bounds one metadata or JWKS fetch.
const fetchTimeout = 10 * time.Second

// discoverJWKS reads the issuer's metadata, RFC 8414 first and OpenID
// configuration second, and returns its jwks_uri once the document names
// exactly this issuer (a mismatch would let another server's keys in).
func discoverJWKS(ctx context.Context, client *http.Client, issuer string) (string, error) {
	var errs []error
	for _, u := range metadataURLs(issuer) {
		var meta struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := getJSON(ctx, client, u, &meta); err != nil {
			errs = append(errs, err)
			continue
		}
		if meta.Issuer != issuer {
			return "", fmt.Errorf("discovery %s: issuer %q, want %q", u, meta.Issuer, issuer)
		}
		if meta.JWKSURI == "" {
			return "", fmt.Errorf("discovery %s: no jwks_uri", u)
		}
		return meta.JWKSURI, nil
	}
	return "", fmt.Errorf("discovery of %s: %w", issuer, errors.Join(errs...))
}

// metadataURLs are where an issuer's metadata may be: RFC 8414 inserts the
// well-known segment before the issuer's path, OpenID Connect appends it.
func metadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	path := strings.TrimSuffix(u.Path, "/")
	base := u.Scheme + "://" + u.Host
	return []string{
		base + "/.well-known/oauth-authorization-server" + path,
		base + path + "/.well-known/openid-configuration",
	}
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(b) > maxDocumentBytes {
		return fmt.Errorf("GET %s: document over %d bytes", u, maxDocumentBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}
