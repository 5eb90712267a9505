package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/oauth"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// oauthEnv is the deployment these tests run: a real authorization server,
// the backend on loopback, and two tunnels in front of it, each its own
// public URL and so its own resource.
type oauthEnv struct {
	as        *authServer
	srv       *Server
	direct    string   // the backend's own base URL
	tunnels   []string // the tunnels' base URLs
	resources []string // <tunnel>/mcp
	skew      atomic.Int64
	logs      *lockedWriter // the server's log
	operator  string        // the static bearer token, configured beside OAuth
}

const elsewhere = "https://elsewhere.example/mcp" // a resource the server knows, not ours

// startOAuthEnv starts the deployment; mutate, if any, adjusts its config.
func startOAuthEnv(t testing.TB, mutate ...func(*config.Config)) *oauthEnv {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	env := &oauthEnv{direct: "http://" + hs.Listener.Addr().String(), logs: &lockedWriter{w: &bytes.Buffer{}}}
	for range 2 {
		tun := "http://" + startTunnel(t, hs.Listener.Addr().String())
		env.tunnels = append(env.tunnels, tun)
		env.resources = append(env.resources, tun+"/mcp")
	}
	env.as = startAuthServer(t, append(slices.Clone(env.resources), elsewhere)...)
	cfg := config.Default()
	env.operator = "operator-static-token-0123456789"
	cfg.Auth.BearerTokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.Auth.BearerTokenFile, []byte(env.operator+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Auth.OAuth = &config.OAuth{Issuer: env.as.Issuer, Resources: env.resources, Scopes: config.DefaultScopes()}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(env.logs, nil))
	srv := newServer(t, cfg, log, WithOAuthOptions(oauth.Options{
		Now: func() time.Time { return time.Now().Add(time.Duration(env.skew.Load())) },
	}))
	env.srv = srv
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return env
}

// clientToken gets a token by client credentials for resource and scope.
func (e *oauthEnv) clientToken(t testing.TB, issuer, resource, scope string) string {
	t.Helper()
	cc := clientcredentials.Config{
		ClientID:       "operator",
		ClientSecret:   "operator-secret-0123456789",
		TokenURL:       issuer + "/token",
		Scopes:         strings.Fields(scope),
		EndpointParams: url.Values{"resource": {resource}},
	}
	tok, err := cc.Token(context.Background())
	if err != nil {
		t.Fatalf("client credentials from %s for %s: %v", issuer, resource, err)
	}
	return tok.AccessToken
}

// codeToken runs authorization code + PKCE with the pre-registered public
// client "app", following the server's redirects as a browser would (the
// test server's interaction logs "alice" in and consents).
func (e *oauthEnv) codeToken(t testing.TB, resource, scope string) string {
	t.Helper()
	const redirect = "http://127.0.0.1/callback"
	conf := oauth2.Config{
		ClientID:    "app",
		RedirectURL: redirect,
		Scopes:      strings.Fields(scope),
		Endpoint:    oauth2.Endpoint{AuthURL: e.as.Issuer + "/auth", TokenURL: e.as.Issuer + "/token", AuthStyle: oauth2.AuthStyleInParams},
	}
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))
	jar, _ := cookiejar.New(nil)
	var code string
	browser := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirect) {
			if e := req.URL.Query().Get("error"); e != "" {
				return fmt.Errorf("authorization refused: %s: %s", e, req.URL.Query().Get("error_description"))
			}
			code = req.URL.Query().Get("code")
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := browser.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code == "" {
		t.Fatalf("no code from the authorization endpoint: %s", resp.Status)
	}
	tok, err := conf.Exchange(context.Background(), code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", resource))
	if err != nil {
		t.Fatalf("code exchange: %v", err)
	}
	return tok.AccessToken
}

// mcpCall posts one JSON-RPC request to base/mcp with the token (if any),
// and returns status, WWW-Authenticate and body.
func mcpCall(t testing.TB, base, path, token, method string, params any) (int, string, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b
}

func callTool(t testing.TB, base, token, tool string, args any) (int, string, []byte) {
	t.Helper()
	return mcpCall(t, base, "/mcp", token, "tools/call", map[string]any{"name": tool, "arguments": args})
}

// challenge parses a Bearer WWW-Authenticate header with the go-sdk's
// client-side parser, as MCP clients read it.
func challenge(t testing.TB, h string) map[string]string {
	t.Helper()
	cs, err := oauthex.ParseWWWAuthenticate([]string{h})
	if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
		t.Fatalf("WWW-Authenticate %q: %v %v", h, cs, err)
	}
	return cs[0].Params
}

func (e *oauthEnv) counters(t testing.TB) string {
	t.Helper()
	c := e.srv.Admission().Snapshot().Counters
	return fmt.Sprintf("%+v", c)
}

// TestOAuthTokensThroughTunnels: tokens the real authorization server
// issues (client credentials, and authorization code + PKCE) for either
// tunnel's resource call tools through that tunnel; the call log names the
// subject and client, never the token.
func TestOAuthTokensThroughTunnels(t *testing.T) {
	env := startOAuthEnv(t)
	all := "mcp:read mcp:write mcp:exec"
	for i, tun := range env.tunnels {
		t.Run(fmt.Sprintf("client credentials via tunnel %d", i), func(t *testing.T) {
			tok := env.clientToken(t, env.as.Issuer, env.resources[i], all)
			status, _, body := callTool(t, tun, tok, "shell.exec", map[string]any{"command": "echo via-tunnel"})
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			r := parseReply(t, body)
			if r.errorCode() != "" || !strings.Contains(string(r.Result.StructuredContent), "via-tunnel") {
				t.Fatalf("reply %s", body)
			}
			if strings.Contains(env.logs.String(), tok) {
				t.Fatal("the token is in the log")
			}
		})
	}
	t.Run("authorization code + PKCE via tunnel 1", func(t *testing.T) {
		tok := env.codeToken(t, env.resources[1], all)
		status, _, body := callTool(t, env.tunnels[1], tok, "file.list", map[string]any{"path": "/"})
		if status != http.StatusOK || parseReply(t, body).errorCode() != "" {
			t.Fatalf("status %d: %s", status, body)
		}
		var line map[string]any
		for l := range strings.Lines(env.logs.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "tool call" && m["tool"] == "file.list" {
				line = m
			}
		}
		if line["subject"] != "alice" || line["clientId"] != "app" {
			t.Fatalf("call log line %v, want subject alice and clientId app", line)
		}
		if strings.Contains(env.logs.String(), tok) {
			t.Fatal("the token is in the log")
		}
	})
	t.Run("the operator's static token beside OAuth, via tunnel 0", func(t *testing.T) {
		status, _, body := mcpCall(t, env.tunnels[0], "/mcp", env.operator, "tools/list", map[string]any{})
		if status != http.StatusOK || len(toolNames(t, body)) != len(mcpwire.ToolNames()) {
			t.Fatalf("tools/list with the static token: %d %s", status, body)
		}
		status, _, body = callTool(t, env.tunnels[0], env.operator, "shell.exec", map[string]any{"command": "true"})
		if status != http.StatusOK || parseReply(t, body).errorCode() != "" {
			t.Fatalf("shell.exec with the static token: %d %s", status, body)
		}
		if !strings.Contains(env.logs.String(), `"tool":"shell.exec","class":"shell","queueWaitMs":0`) || !strings.Contains(env.logs.String(), `"subject":"operator"`) {
			t.Fatalf("no call log line for the operator:\n%s", env.logs.String())
		}
	})
	t.Run("on loopback, the tunnel bypassed", func(t *testing.T) {
		status, wa, _ := callTool(t, env.direct, "", "system.info", map[string]any{})
		if want := env.tunnels[0] + "/.well-known/oauth-protected-resource/mcp"; status != 401 || challenge(t, wa)["resource_metadata"] != want {
			t.Fatalf("without a token: %d %q, want 401 naming %s", status, wa, want)
		}
		tok := env.clientToken(t, env.as.Issuer, env.resources[0], "mcp:read")
		status, _, body := callTool(t, env.direct, tok, "system.info", map[string]any{})
		if status != http.StatusOK || parseReply(t, body).errorCode() != "" {
			t.Fatalf("with a token: %d %s", status, body)
		}
	})
	t.Run("metadata per tunnel, both forms", func(t *testing.T) {
		for i, tun := range env.tunnels {
			for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
				var meta oauthex.ProtectedResourceMetadata
				if code := getJSON(t, tun+path, &meta); code != 200 {
					t.Fatalf("%s%s = %d", tun, path, code)
				}
				if meta.Resource != env.resources[i] || !slices.Equal(meta.AuthorizationServers, []string{env.as.Issuer}) ||
					!slices.Equal(meta.ScopesSupported, []string{"mcp:exec", "mcp:read", "mcp:write"}) || !slices.Equal(meta.BearerMethodsSupported, []string{"header"}) {
					t.Fatalf("%s%s: %+v", tun, path, meta)
				}
			}
		}
	})
}

// TestOAuthRefusals: every way a token can be wrong, with tokens from the
// real authorization server (or forged from one of its tokens), gets 401 or
// 403 with the challenge a client needs, and never reaches admission: the
// command that would leave a marker never runs and no counter moves.
func TestOAuthRefusals(t *testing.T) {
	env := startOAuthEnv(t)
	tun, res := env.tunnels[0], env.resources[0]
	all := "mcp:read mcp:write mcp:exec"
	good := env.clientToken(t, env.as.Issuer, res, all)
	claims := payload(t, good)
	metaURL := tun + "/.well-known/oauth-protected-resource/mcp"

	// The server's published key, and a key it never had.
	var set jose.JSONWebKeySet
	if code := getJSON(t, env.as.Issuer+"/jwks", &set); code != 200 || len(set.Keys) != 1 {
		t.Fatalf("jwks: %d %+v", code, set)
	}
	pub := set.Keys[0]
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub.Key)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	tests := []struct {
		name     string
		token    func() string
		skew     time.Duration
		query    bool
		status   int
		code     string // error= of the challenge
		describe string // part of error_description
		scope    string // scope= of the challenge
	}{
		{name: "no token", token: func() string { return "" }, status: 401, scope: "mcp:exec mcp:read mcp:write"},
		{name: "wrong issuer (same key, other issuer)", token: func() string { return env.clientToken(t, env.as.OtherIssuer, res, all) },
			status: 401, code: "invalid_token", describe: "issuer"},
		{name: "wrong audience", token: func() string { return env.clientToken(t, env.as.Issuer, elsewhere, all) },
			status: 401, code: "invalid_token", describe: "audience"},
		{name: "expired", token: func() string { return good }, skew: 11 * time.Minute,
			status: 401, code: "invalid_token", describe: "expired"},
		{name: "not yet valid", token: func() string { return good }, skew: -5 * time.Minute,
			status: 401, code: "invalid_token", describe: "not valid yet"},
		{name: "unknown kid", token: func() string {
			return sign(t, jose.RS256, jose.JSONWebKey{Key: stranger, KeyID: "rotated-away"}, claims)
		}, status: 401, code: "invalid_token", describe: `unknown signing key "rotated-away"`},
		{name: "known kid, other key", token: func() string {
			return sign(t, jose.RS256, jose.JSONWebKey{Key: stranger, KeyID: pub.KeyID}, claims)
		}, status: 401, code: "invalid_token", describe: "bad signature"},
		{name: "alg none", token: func() string {
			return b64(`{"alg":"none","typ":"at+jwt","kid":"`+pub.KeyID+`"}`) + "." + b64(string(claims)) + "."
		}, status: 401, code: "invalid_token", describe: `"none" not accepted`},
		{name: "HS256 signed with the public key", token: func() string {
			return sign(t, jose.HS256, jose.JSONWebKey{Key: pubPEM, KeyID: pub.KeyID}, claims)
		}, status: 401, code: "invalid_token", describe: `"HS256" not accepted`},
		{name: "payload tampered", token: func() string {
			parts := strings.Split(good, ".")
			more := strings.Replace(string(claims), `"exp":`, `"extra":1,"exp":`, 1)
			return parts[0] + "." + b64(more) + "." + parts[2]
		}, status: 401, code: "invalid_token", describe: "bad signature"},
		{name: "missing scope (step-up)", token: func() string { return env.clientToken(t, env.as.Issuer, res, "mcp:read") },
			status: 403, code: "insufficient_scope", describe: "shell.exec needs scope mcp:exec", scope: "mcp:exec"},
		{name: "none of our scopes", token: func() string { return env.clientToken(t, env.as.Issuer, res, "") },
			status: 403, code: "insufficient_scope", describe: "none of this server's scopes", scope: "mcp:exec mcp:read mcp:write"},
		{name: "wrong static token", token: func() string { return env.operator + "x" },
			status: 401, code: "invalid_token", describe: "not a signed JWT"},
		{name: "token in the query string", token: func() string { return good }, query: true,
			status: 401, code: "invalid_request", describe: "query string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token()
			env.skew.Store(int64(tc.skew))
			defer env.skew.Store(0)
			marker := filepath.Join(t.TempDir(), "ran")
			before := env.counters(t)
			path, header := "/mcp", tok
			if tc.query {
				path, header = "/mcp?access_token="+url.QueryEscape(tok), ""
			}
			status, wa, body := mcpCall(t, tun, path, header, "tools/call", map[string]any{"name": "shell.exec", "arguments": map[string]any{"command": "touch " + marker}})
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			p := challenge(t, wa)
			if p["resource_metadata"] != metaURL || p["error"] != tc.code || !strings.Contains(p["error_description"], tc.describe) {
				t.Fatalf("challenge %q, want resource_metadata %s, error %q, description with %q", wa, metaURL, tc.code, tc.describe)
			}
			if tc.scope != "" && p["scope"] != tc.scope {
				t.Fatalf("challenge scope %q, want %q", p["scope"], tc.scope)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the refused call ran")
			}
			if after := env.counters(t); after != before {
				t.Fatalf("admission counters moved: %s -> %s", before, after)
			}
		})
	}

	// The same good token passes once the request is right: the refusals
	// above were about the token, not the setup.
	status, _, body := callTool(t, tun, good, "system.info", map[string]any{})
	if status != http.StatusOK || parseReply(t, body).errorCode() != "" {
		t.Fatalf("good token: %d %s", status, body)
	}

	// Floods of refusals are a line per flow a second with the exact
	// count, not a line per request: tokens naming a key id of their own
	// (1 KB each), and a read-only token calling shell.exec.
	readOnly := env.clientToken(t, env.as.Issuer, res, "mcp:read")
	from := len(env.logs.String())
	began := time.Now()
	const n = 200
	for i := range n {
		forged := sign(t, jose.RS256, jose.JSONWebKey{Key: stranger, KeyID: fmt.Sprintf("kid-%d-%s", i, strings.Repeat("k", 1000))}, claims)
		if status, wa, _ := callTool(t, tun, forged, "system.info", map[string]any{}); status != http.StatusUnauthorized || len(wa) > 1024 {
			t.Fatalf("forged kid: %d, challenge of %d bytes", status, len(wa))
		}
		if status, _, _ := callTool(t, tun, readOnly, "shell.exec", map[string]any{"command": "true"}); status != http.StatusForbidden {
			t.Fatalf("read-only token calling shell.exec: %d, want 403", status)
		}
	}
	seconds := int(time.Since(began)/time.Second) + 3
	var lines []string
	proctest.Eventually(t, "both floods counted in the log", func() bool {
		lines = strings.Split(strings.TrimSpace(env.logs.String()[from:]), "\n")
		got := map[int]int{}
		for _, l := range lines {
			var m struct {
				Msg    string `json:"msg"`
				Status int    `json:"status"`
				Count  int    `json:"count"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "requests refused" {
				got[m.Status] += m.Count
			}
		}
		// The table's refusals above may be flushed after from: at most
		// one each.
		return got[http.StatusUnauthorized] >= n && got[http.StatusForbidden] >= n &&
			got[http.StatusUnauthorized]+got[http.StatusForbidden] <= 2*n+len(tests)
	})
	refusalLines := 0
	for _, l := range lines {
		if strings.Contains(l, `refused"`) {
			refusalLines++
		}
	}
	// Two flows (unauthenticated through the tunnel, the read-only
	// token's) a window, and the table's leftovers.
	if refusalLines > 2*seconds+len(tests) {
		t.Errorf("%d refusals wrote %d refusal lines in about %d s; want two a second:\n%s", 2*n, refusalLines, seconds, strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if len(l) > 1024 {
			t.Errorf("a log line of %d bytes: %.200s", len(l), l)
		}
	}
}

// TestOAuthToolsListFollowsScopes: tools/list shows a token exactly the
// tools its scopes let it call.
func TestOAuthToolsListFollowsScopes(t *testing.T) {
	env := startOAuthEnv(t)
	tests := []struct {
		scope string
		want  []string
	}{
		{"mcp:read", []string{"file.list", "file.read", "process.list", "service.status", "system.info"}},
		{"mcp:exec", []string{"job.cancel", "job.list", "job.output", "job.start", "job.status", "job.wait", "shell.exec"}},
		{"mcp:read mcp:write", []string{"file.list", "file.read", "file.write", "process.kill", "process.list", "service.control", "service.status", "system.info"}},
	}
	for _, tc := range tests {
		t.Run(tc.scope, func(t *testing.T) {
			tok := env.clientToken(t, env.as.Issuer, env.resources[0], tc.scope)
			status, _, body := mcpCall(t, env.tunnels[0], "/mcp", tok, "tools/list", map[string]any{})
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			if got := toolNames(t, body); !slices.Equal(got, tc.want) {
				t.Fatalf("tools %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOAuthTypeScriptClient: the official TypeScript SDK client discovers
// the authorization server from the 401, registers itself, runs
// authorization code + PKCE with the resource parameter, and calls tools
// through a tunnel.
func TestOAuthTypeScriptClient(t *testing.T) {
	env := startOAuthEnv(t)
	node := needNode(t)
	calls, _ := json.Marshal(map[string]any{"calls": []map[string]any{
		{"name": "system.info"},
		{"name": "shell.exec", "arguments": map[string]any{"command": "echo from-ts"}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", env.resources[1], string(calls))
	cmd.Dir = oauthTestdata(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Tools   []string
		Results []struct {
			Name              string
			IsError           bool
			StructuredContent json.RawMessage
		}
		RegisteredClientID  string
		Scope               string
		Resource            string
		CodeChallengeMethod string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client said %q: %v", out, err)
	}
	if len(got.Tools) != len(mcpwire.ToolNames()) || got.RegisteredClientID == "" || got.Resource != env.resources[1] || got.CodeChallengeMethod != "S256" {
		t.Fatalf("client result %+v", got)
	}
	if len(got.Results) != 2 || got.Results[0].IsError || got.Results[1].IsError || !strings.Contains(string(got.Results[1].StructuredContent), "from-ts") {
		t.Fatalf("tool results %+v", got.Results)
	}
	if !strings.Contains(env.logs.String(), `"subject":"alice","clientId":"`+got.RegisteredClientID+`"`) {
		t.Fatalf("no call log line for alice through client %s:\n%s", got.RegisteredClientID, env.logs.String())
	}
}

// toolNames are the names in a tools/list answer, sorted.
func toolNames(t testing.TB, body []byte) []string {
	t.Helper()
	var r struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("tools/list answer %.200s: %v", body, err)
	}
	var got []string
	for _, tl := range r.Result.Tools {
		got = append(got, tl.Name)
	}
	slices.Sort(got)
	return got
}

// payload returns a JWT's claims, unverified, to forge tokens from.
func payload(t testing.TB, tok string) []byte {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %.40s", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// sign signs raw claims with go-jose as the test's forger.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key jose.JSONWebKey, claims []byte) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(claims, &m); err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(m).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
