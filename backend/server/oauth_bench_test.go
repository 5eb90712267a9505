package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/overdeck/mcp-backend/backend/config"
)

// BenchmarkToolCallAuth: what authentication adds to a request through the
// real handler: none, the static bearer token, and OAuth JWT access tokens
// (RS256 and ES256) verified against a JWKS already cached (so no fetch
// happens during the run). "ping" is the cheapest MCP request, where the
// difference shows; "system.info" a real tool call.
//
//	go test -run '^$' -bench ToolCallAuth -benchmem ./backend/server/
func BenchmarkToolCallAuth(b *testing.B) {
	for _, m := range []struct{ name, body string }{
		{"ping", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
		{"system.info", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`},
	} {
		b.Run(m.name, func(b *testing.B) { benchAuthModes(b, []byte(m.body)) })
	}
}

func benchAuthModes(b *testing.B, body []byte) {
	b.Run("no-auth", func(b *testing.B) {
		benchPost(b, startBackend(b, nil).srv.Handler(), body)
	})
	b.Run("bearer-token-file", func(b *testing.B) {
		tokFile := filepath.Join(b.TempDir(), "token")
		const tok = "0123456789abcdef0123456789abcdef"
		if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
			b.Fatal(err)
		}
		bk := startBackend(b, func(c *config.Config) { c.Auth.BearerTokenFile = tokFile })
		benchPost(b, bk.srv.Handler(), body, "Authorization", "Bearer "+tok)
	})
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		alg  jose.SignatureAlgorithm
		key  any
	}{{"oauth-jwt-RS256", jose.RS256, rsaKey}, {"oauth-jwt-ES256", jose.ES256, ecKey}} {
		b.Run(k.name, func(b *testing.B) {
			jwk := jose.JSONWebKey{Key: k.key, KeyID: "bench", Algorithm: string(k.alg), Use: "sig"}
			keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk.Public()}})
			}))
			defer keys.Close()
			const issuer, resource = "https://auth.example.com", "https://mcp.example.com/mcp"
			bk := startBackend(b, func(c *config.Config) {
				c.Auth.OAuth = &config.OAuth{Issuer: issuer, JWKSURL: keys.URL, Resources: []string{resource}, Scopes: config.DefaultScopes()}
			})
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jwk}, (&jose.SignerOptions{}).WithType("at+jwt"))
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			tok, err := jwt.Signed(signer).Claims(jwt.Claims{
				Issuer: issuer, Subject: "alice", Audience: jwt.Audience{resource},
				IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour)),
			}).Claims(map[string]any{"scope": "mcp:read", "client_id": "bench"}).Serialize()
			if err != nil {
				b.Fatal(err)
			}
			benchPost(b, bk.srv.Handler(), body, "Authorization", "Bearer "+tok)
		})
	}
}
