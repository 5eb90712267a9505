package server

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// keyIssuer publishes one signing key at /jwks and signs whatever claims
// a test gives it. The real authorization server of the other OAuth tests
// always names a subject or a client; a token that names no one is what
// this one is for.
type keyIssuer struct {
	url string
	key jose.JSONWebKey
}

func startKeyIssuer(t testing.TB) *keyIssuer {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	k := jose.JSONWebKey{Key: priv, KeyID: "k1", Algorithm: string(jose.RS256), Use: "sig"}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jwks" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k.Public()}})
	}))
	t.Cleanup(hs.Close)
	return &keyIssuer{url: hs.URL, key: k}
}

// token signs claims with iss, aud and exp set, and the others given.
func (is *keyIssuer) token(t testing.TB, aud string, claims map[string]any) string {
	t.Helper()
	all := map[string]any{"iss": is.url, "aud": aud, "exp": time.Now().Add(5 * time.Minute).Unix(), "scope": "mcp:read mcp:exec"}
	for k, v := range claims {
		all[k] = v
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return sign(t, jose.RS256, is.key, b)
}

// TestOAuthTokenNamingNoOne: a valid token without sub, client_id or azp
// is refused 401 naming the missing claim, never served as anonymous;
// with auth.oauth.subjectClaim it acts for the principal that claim names
// (rules on that oauth principal apply), and a token without that claim
// too is refused naming it.
func TestOAuthTokenNamingNoOne(t *testing.T) {
	const resource = "http://127.0.0.1/mcp"
	is := startKeyIssuer(t)
	serve := func(claim string) *backend {
		return startBackend(t, func(c *config.Config) {
			c.Auth.OAuth = &config.OAuth{Issuer: is.url, JWKSURL: is.url + "/jwks", Resources: []string{resource}, Scopes: config.DefaultScopes(), SubjectClaim: claim}
			c.Policy.Rules = []policy.Rule{
				{ID: "carol-reads-only", Action: policy.Deny, Reason: "no commands for carol", Tools: []string{mcpwire.ToolShellExec},
					Principals: []policy.Principal{{Kind: "oauth", ID: is.url + " email:carol@example.com"}}},
				{ID: "nobody-anonymous", Action: policy.Deny, Reason: "anonymous", Principals: []policy.Principal{{Kind: "anonymous"}}},
			}
		})
	}
	for _, tc := range []struct {
		name     string
		claim    string // auth.oauth.subjectClaim
		claims   map[string]any
		status   int
		describe string // part of the challenge's error_description
		code     string // shell.exec's tool error on 200
	}{
		{"no sub, no client", "", map[string]any{"email": "carol@example.com"}, 401, "no sub claim", ""},
		{"empty sub", "", map[string]any{"sub": ""}, 401, "no sub claim", ""},
		{"a subject", "", map[string]any{"sub": "dave"}, 200, "", ""},
		{"a client", "", map[string]any{"azp": "batch"}, 200, "", ""},
		{"the named claim", "email", map[string]any{"email": "carol@example.com"}, 200, "", string(mcpwire.CodePermissionDenied)},
		{"the named claim missing", "email", map[string]any{"upn": "carol"}, 401, `no "email" claim`, ""},
		{"the named claim not a string", "email", map[string]any{"email": 7}, 401, `no "email" claim`, ""},
		{"sub wins over the named claim", "email", map[string]any{"sub": "dave", "email": "carol@example.com"}, 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := serve(tc.claim)
			tok := is.token(t, resource, tc.claims)
			status, wa, body := callTool(t, b.url, tok, mcpwire.ToolShellExec, map[string]any{"command": "true"})
			if status != tc.status {
				t.Fatalf("status %d, want %d: %.300s", status, tc.status, body)
			}
			if tc.status == 401 {
				if p := challenge(t, wa); p["error"] != "invalid_token" || !strings.Contains(p["error_description"], tc.describe) {
					t.Fatalf("challenge %q, want invalid_token naming %q", wa, tc.describe)
				}
				return
			}
			r := parseReply(t, body)
			if got := r.errorCode(); got != tc.code {
				t.Fatalf("shell.exec: %q, want %q: %.300s", got, tc.code, body)
			}
			if tc.code != "" {
				if e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey]); !strings.Contains(e.Message, "carol-reads-only") {
					t.Fatalf("refused by another rule: %s", e.Message)
				}
			}
		})
	}
	t.Run("config", func(t *testing.T) {
		for _, bad := range []string{"sub", "jti", "scope", "e mail", strings.Repeat("x", 65)} {
			c := config.Default()
			c.Auth.OAuth = &config.OAuth{Issuer: is.url, Resources: []string{resource}, Scopes: config.DefaultScopes(), SubjectClaim: bad}
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "auth.oauth.subjectClaim") {
				t.Errorf("subjectClaim %q: %v, want an error naming auth.oauth.subjectClaim", bad, err)
			}
		}
	})
}

// TestOAuthPrincipalGlobCrossesSlash: a rule on "ISSUER *" applies to
// every subject of the issuer, those holding "/" too (google-oauth2/1234,
// spiffe://corp/ci), through the real server; "ISSUER spiffe://corp/*"
// only to that trust domain's.
func TestOAuthPrincipalGlobCrossesSlash(t *testing.T) {
	const resource = "http://127.0.0.1/mcp"
	is := startKeyIssuer(t)
	b := startBackend(t, func(c *config.Config) {
		c.Auth.OAuth = &config.OAuth{Issuer: is.url, JWKSURL: is.url + "/jwks", Resources: []string{resource}, Scopes: config.DefaultScopes()}
		c.Policy.Rules = []policy.Rule{
			{ID: "issuer-no-exec", Action: policy.Deny, Tools: []string{mcpwire.ToolShellExec}, Principals: []policy.Principal{{Kind: "oauth", ID: is.url + " *"}}},
			{ID: "corp-no-info", Action: policy.Deny, Tools: []string{mcpwire.ToolSystemInfo}, Principals: []policy.Principal{{Kind: "oauth", ID: is.url + " spiffe://corp/*"}}},
		}
	})
	for _, tc := range []struct {
		sub, tool, rule string // rule "": allowed
	}{
		{"dave", mcpwire.ToolShellExec, "issuer-no-exec"},
		{"google-oauth2/1234", mcpwire.ToolShellExec, "issuer-no-exec"},
		{"spiffe://corp/ci", mcpwire.ToolShellExec, "issuer-no-exec"},
		{"spiffe://corp/ci", mcpwire.ToolSystemInfo, "corp-no-info"},
		{"spiffe://corp/ci/deploy", mcpwire.ToolSystemInfo, "corp-no-info"},
		{"spiffe://other/ci", mcpwire.ToolSystemInfo, ""},
		{"google-oauth2/1234", mcpwire.ToolSystemInfo, ""},
	} {
		t.Run(tc.sub+"/"+tc.tool, func(t *testing.T) {
			args := map[string]any{}
			if tc.tool == mcpwire.ToolShellExec {
				args["command"] = "true"
			}
			status, _, body := callTool(t, b.url, is.token(t, resource, map[string]any{"sub": tc.sub}), tc.tool, args)
			if status != http.StatusOK {
				t.Fatalf("status %d: %.300s", status, body)
			}
			r := parseReply(t, body)
			if tc.rule == "" {
				if code := r.errorCode(); code != "" {
					t.Fatalf("refused (%s): %.300s", code, body)
				}
				return
			}
			if r.errorCode() != string(mcpwire.CodePermissionDenied) {
				t.Fatalf("not refused: %.300s", body)
			}
			if e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey]); !strings.Contains(e.Message, "rule "+tc.rule) {
				t.Fatalf("refused by another rule: %s", e.Message)
			}
		})
	}
}
