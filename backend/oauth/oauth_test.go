package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/overdeck/mcp-backend/backend/config"
)

// issuer is an authorization server's key publication, for what the real
// one cannot be made to show on demand: key rotation, and how often the
// verifier fetches.
type issuer struct {
	hs      *httptest.Server
	path    string // issuer path, "" or e.g. "/tenant"
	oidc    bool   // publish metadata only as OpenID configuration
	liar    bool   // metadata names another issuer
	mu      sync.Mutex
	keys    []jose.JSONWebKey // published (public)
	extra   []json.RawMessage // published as they are
	fetches atomic.Int64
	hold    chan struct{} // when set, /keys answers only once it is closed
}

func newIssuer(t testing.TB, path string) *issuer {
	t.Helper()
	is := &issuer{path: path}
	is.hs = httptest.NewServer(http.HandlerFunc(is.serve))
	t.Cleanup(is.hs.Close)
	return is
}

func (is *issuer) url() string { return is.hs.URL + is.path }

func (is *issuer) serve(w http.ResponseWriter, r *http.Request) {
	meta := map[string]string{"issuer": is.url(), "jwks_uri": is.hs.URL + "/keys"}
	if is.liar {
		meta["issuer"] = "https://someone-else.example"
	}
	switch r.URL.Path {
	case "/.well-known/oauth-authorization-server" + is.path:
		if is.oidc {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(meta)
	case is.path + "/.well-known/openid-configuration":
		json.NewEncoder(w).Encode(meta)
	case "/keys":
		is.fetches.Add(1)
		if is.hold != nil {
			<-is.hold
		}
		is.mu.Lock()
		defer is.mu.Unlock()
		set := map[string]any{"keys": append(slicesOfAny(is.keys), slicesOfAny(is.extra)...)}
		json.NewEncoder(w).Encode(set)
	default:
		http.NotFound(w, r)
	}
}

func slicesOfAny[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// key is a signing key of the issuer.
type key struct{ priv jose.JSONWebKey }

func newKey(t testing.TB, kid string) key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"}}
}

func (k key) public() jose.JSONWebKey { return k.priv.Public() }

func (is *issuer) publish(ks ...key) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = nil
	for _, k := range ks {
		is.keys = append(is.keys, k.public())
	}
}

const testResource = "https://mcp.example.com/mcp"

func (k key) token(t testing.TB, iss string, now time.Time) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(k.priv.Algorithm), Key: k.priv}, (&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{
		Issuer: iss, Subject: "alice", Audience: jwt.Audience{testResource},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)),
	}).Claims(map[string]any{"scope": "mcp:read", "client_id": "app"}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clock is a test's time, moved by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock          { c := &clock{}; c.ns.Store(time.Now().UnixNano()); return c }
func (c *clock) now() time.Time { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) {
	c.ns.Add(int64(d))
}

func newVerifier(t testing.TB, iss string, jwks string, c *clock) *Verifier {
	t.Helper()
	v, err := New(Options{
		Config:     config.OAuth{Issuer: iss, JWKSURL: jwks, Resources: []string{testResource}},
		Now:        c.now,
		MinRefresh: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRotationAndRefreshRate: the first token loads the keys; a flood of
// tokens with an unknown kid costs no fetch inside the refresh interval;
// after a rotation the new kid is fetched once, by one of many concurrent
// requests, as soon as the interval allows.
func TestRotationAndRefreshRate(t *testing.T) {
	is := newIssuer(t, "")
	c := newClock()
	a, b := newKey(t, "a"), newKey(t, "b")
	is.publish(a)
	v := newVerifier(t, is.url(), "", c)
	ctx := context.Background()

	id, err := v.Verify(ctx, a.token(t, is.url(), c.now()))
	if err != nil || id.Subject != "alice" || id.ClientID != "app" || strings.Join(id.Scopes, " ") != "mcp:read" {
		t.Fatalf("first token: %+v %v", id, err)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("%d key fetches for the first token, want 1", n)
	}

	is.publish(a, b) // rotation begins: b published beside a
	flood := func(k key) (refused int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := v.Verify(ctx, k.token(t, is.url(), c.now())); err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return refused
	}
	if r := flood(b); r != 50 {
		t.Fatalf("%d of 50 tokens with kid b refused inside the refresh interval, want all", r)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("%d key fetches after a flood of unknown kids inside the interval, want still 1", n)
	}
	c.add(time.Minute)
	if r := flood(b); r != 0 {
		t.Fatalf("%d of 50 tokens with kid b refused after the interval, want none", r)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("%d key fetches, want 2: one refresh for 50 concurrent unknown kids", n)
	}

	is.publish(b) // a retired: gone at the next refresh
	if err := v.keys.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, a.token(t, is.url(), c.now())); err == nil || !strings.Contains(err.Error(), `unknown signing key "a"`) {
		t.Fatalf("token of a retired key: %v", err)
	}
}

// TestKeyFetchOutlivesTheCallerThatRanIt: the first token's caller runs
// the key fetch and gives up while it is under way (a client timing out):
// the fetch still completes, so the tokens that follow within the refresh
// interval verify instead of finding no key for a minute.
func TestKeyFetchOutlivesTheCallerThatRanIt(t *testing.T) {
	is := newIssuer(t, "")
	is.hold = make(chan struct{})
	c := newClock()
	a := newKey(t, "a")
	is.publish(a)
	v := newVerifier(t, is.url(), is.hs.URL+"/keys", c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, a.token(t, is.url(), c.now()))
		done <- err
	}()
	for is.fetches.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(is.hold)
	<-done
	if _, err := v.Verify(context.Background(), a.token(t, is.url(), c.now())); err != nil {
		t.Fatalf("a token after the first caller gave up: %v", err)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("%d key fetches, want 1", n)
	}
}

// TestDiscovery: metadata is found where RFC 8414 or OpenID Connect put
// it, a configured jwksUrl needs none, and metadata naming another issuer
// loads no keys.
func TestDiscovery(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		oidc     bool
		liar     bool
		jwks     bool
		accepted bool
	}{
		{name: "RFC 8414, issuer with a path", path: "/tenant", accepted: true},
		{name: "OpenID configuration only", oidc: true, accepted: true},
		{name: "configured jwksUrl, no metadata at all", oidc: true, liar: true, jwks: true, accepted: true},
		{name: "metadata names another issuer", liar: true, accepted: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := newIssuer(t, tc.path)
			is.oidc, is.liar = tc.oidc, tc.liar
			k := newKey(t, "k")
			is.publish(k)
			jwks := ""
			if tc.jwks {
				jwks = is.hs.URL + "/keys"
			}
			c := newClock()
			v := newVerifier(t, is.url(), jwks, c)
			_, err := v.Verify(context.Background(), k.token(t, is.url(), c.now()))
			if (err == nil) != tc.accepted {
				t.Fatalf("err = %v, want accepted %v", err, tc.accepted)
			}
		})
	}
}

// TestOnlyPublicSigningKeys: a published symmetric key must not become a
// verification key (anyone who read the set could sign with it), and keys
// this library cannot read must not hide the usable ones.
func TestOnlyPublicSigningKeys(t *testing.T) {
	is := newIssuer(t, "")
	k := newKey(t, "good")
	is.publish(k)
	secret := []byte("0123456789abcdef0123456789abcdef")
	is.extra = []json.RawMessage{
		json.RawMessage(`{"kty":"oct","kid":"shared","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}`),
		json.RawMessage(`{"kty":"XYZ","kid":"future","x":"AA"}`),
	}
	c := newClock()
	v := newVerifier(t, is.url(), "", c)
	if _, err := v.Verify(context.Background(), k.token(t, is.url(), c.now())); err != nil {
		t.Fatalf("good key beside unusable ones: %v", err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: secret, KeyID: "shared"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: is.url(), Audience: jwt.Audience{testResource}, Expiry: jwt.NewNumericDate(c.now().Add(time.Minute))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok); err == nil {
		t.Fatal("a token signed with the published symmetric key was accepted")
	}
	if len(v.keys.match("shared")) != 0 {
		t.Fatal("the symmetric key is among the verification keys")
	}
}

// TestChallengeAndMetadataFollowHost: each tunnel's Host gets its own
// resource in the metadata and in the challenge.
func TestChallengeAndMetadataFollowHost(t *testing.T) {
	v, err := New(Options{Config: config.OAuth{
		Issuer:    "https://auth.example.com",
		Resources: []string{"https://a.example.com/mcp", "https://b.example.com/mcp"},
		Scopes:    map[string][]string{"mcp:read": {"system.info"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ host, resource, meta string }{
		{"a.example.com", "https://a.example.com/mcp", "https://a.example.com/.well-known/oauth-protected-resource/mcp"},
		{"B.example.com", "https://b.example.com/mcp", "https://b.example.com/.well-known/oauth-protected-resource/mcp"},
		{"127.0.0.1:3210", "https://a.example.com/mcp", "https://a.example.com/.well-known/oauth-protected-resource/mcp"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+"/.well-known/oauth-protected-resource/mcp", nil)
			w := httptest.NewRecorder()
			v.MetadataHandler().ServeHTTP(w, r)
			var m struct {
				Resource string `json:"resource"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || m.Resource != tc.resource {
				t.Fatalf("metadata %s: %v", w.Body, err)
			}
			w = httptest.NewRecorder()
			v.Challenge(w, r, http.StatusUnauthorized, "invalid_token", `say "hi"`, []string{"mcp:read"})
			want := `Bearer resource_metadata="` + tc.meta + `", scope="mcp:read", error="invalid_token", error_description="say \"hi\""`
			if got := w.Header().Get("WWW-Authenticate"); got != want || w.Code != 401 {
				t.Fatalf("challenge %d %q, want %q", w.Code, got, want)
			}
		})
	}
	if got := v.MetadataPaths(); strings.Join(got, " ") != "/.well-known/oauth-protected-resource /.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("metadata paths %v", got)
	}
}

// BenchmarkVerify is the validation of one token with the keys cached:
// what OAuth adds to every call.
//
//	go test -run '^$' -bench Verify -benchmem ./backend/oauth/
func BenchmarkVerify(b *testing.B) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []key{
		{jose.JSONWebKey{Key: rsaKey, KeyID: "k", Algorithm: string(jose.RS256), Use: "sig"}},
		newKey(b, "k"),
	} {
		b.Run(k.priv.Algorithm, func(b *testing.B) {
			is := newIssuer(b, "")
			is.publish(k)
			c := newClock()
			v := newVerifier(b, is.url(), "", c)
			tok := k.token(b, is.url(), c.now())
			ctx := context.Background()
			if _, err := v.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
