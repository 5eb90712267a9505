package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/oauth"
)

// guard refuses requests that a local server must not answer: a Host that is
// neither loopback nor an allowed public name, an Origin that is present and
// not allowed (DNS rebinding), and, with auth on, a missing or wrong token.
// The identity of an accepted request rides in its context.
func (s *Server) guard(h http.Handler) http.Handler {
	return s.hostGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token == nil && s.oauth == nil {
			h.ServeHTTP(w, r)
			return
		}
		id := s.authenticate(w, r)
		if id == nil {
			return
		}
		h.ServeHTTP(w, r.WithContext(oauth.WithIdentity(r.Context(), id)))
	}))
}

// authenticate returns who r acts for, or nil once it has answered the
// refusal. The static token is the operator's; otherwise, with OAuth on, a
// JWT access token of the configured issuer.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) *oauth.Identity {
	refuse := func(status int, code, why string, scopes []string) *oauth.Identity {
		// A token's error quotes what the token named: bounded for the
		// answer, and aggregated without it for the lines and records.
		why = audit.Bound(why, maxReasonBytes)
		s.refusals.addRequest(status, nil, "", code, s.hostLabel(r.Host), why)
		s.auditHTTPRefusal(r, status, code, "auth", why, "")
		if s.oauth == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-backend"`)
			http.Error(w, "unauthorized: a valid bearer token is required", http.StatusUnauthorized)
			return nil
		}
		s.oauth.Challenge(w, r, status, code, why, scopes)
		return nil
	}
	var all []string
	if s.oauth != nil {
		all = s.oauth.Scopes()
	}
	// A token in a URL ends up in logs and histories: refused even when
	// the header holds a good one, so the client gets fixed.
	if r.URL.Query().Has("access_token") {
		return refuse(http.StatusUnauthorized, "invalid_request", "access tokens in the query string are refused; send Authorization: Bearer", all)
	}
	tok, ok := bearer(r.Header.Get("Authorization"))
	switch {
	case !ok:
		return refuse(http.StatusUnauthorized, "", "", all)
	case s.token != nil && subtle.ConstantTimeCompare([]byte(tok), s.token) == 1:
		return &oauth.Identity{Subject: "operator", Operator: true}
	case s.oauth == nil:
		return refuse(http.StatusUnauthorized, "invalid_token", "wrong token", nil)
	}
	id, err := s.oauth.Verify(r.Context(), tok)
	if err != nil {
		var te *oauth.TokenError
		why := "token not verifiable"
		if errors.As(err, &te) {
			why = te.Description
		}
		return refuse(http.StatusUnauthorized, "invalid_token", why, all)
	}
	if !s.oauth.Known(id) {
		return refuse(http.StatusForbidden, "insufficient_scope", "the token holds none of this server's scopes", all)
	}
	return id
}

// mayCall answers 403 insufficient_scope, naming the scopes that grant the
// tool, when the request's identity may not call it (step-up): before
// admission, so a refused call never takes or waits for a slot.
func (s *Server) mayCall(w http.ResponseWriter, r *http.Request, tool string) bool {
	id := oauth.IdentityFrom(r.Context())
	if s.oauth == nil || id == nil || s.oauth.MayCall(id, tool) {
		return true
	}
	need := s.oauth.ScopesFor(tool)
	why := fmt.Sprintf("tool %s needs scope %s", tool, strings.Join(need, " or "))
	if len(need) == 0 {
		why = fmt.Sprintf("no scope grants tool %s", tool)
	}
	who := s.httpCaller(r, nil)
	s.refusals.addRequest(http.StatusForbidden, &who, tool, "insufficient_scope", s.hostLabel(r.Host), why)
	s.auditHTTPRefusal(r, http.StatusForbidden, "insufficient_scope", "tool-scope", why, tool)
	s.oauth.Challenge(w, r, http.StatusForbidden, "insufficient_scope", why, need)
	return false
}

// metricsGuard lets /metrics be read from loopback as it is and, through
// any other Host hostGuard let in (an allowedHosts name: a tunnel), only
// with the operator's token: who is busy now is not the public's to see.
// Without a token configured, nothing but loopback reads it.
func (s *Server) metricsGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, _ := s.hostName(r.Host); n == "loopback" {
			h.ServeHTTP(w, r)
			return
		}
		tok, ok := bearer(r.Header.Get("Authorization"))
		if s.token != nil && ok && subtle.ConstantTimeCompare([]byte(tok), s.token) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		s.refusals.addRequest(http.StatusUnauthorized, nil, "", "unauthorized", s.hostLabel(r.Host), "/metrics through allowedHosts needs the operator token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-backend"`)
		http.Error(w, "unauthorized: /metrics through a name of allowedHosts needs the operator's bearer token (from loopback it needs none)", http.StatusUnauthorized)
	})
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
}

// hostGuard refuses a Host that is neither loopback nor allowed, and an
// Origin that is present and not allowed (DNS rebinding).
func (s *Server) hostGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := checkHost(r.Host); why != "" {
			// Nothing records it: a flood of junk Hosts leaves no trace to
			// rotate real records away with.
			http.Error(w, "bad request: "+why, http.StatusBadRequest)
			return
		}
		if !s.hostAllowed(r.Host) {
			s.auditHTTPRefusal(r, http.StatusForbidden, "forbidden", "host", "Host not loopback or in allowedHosts", "")
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not loopback or in allowedHosts", r.Host), http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if !s.originAllowed(o) {
				s.auditHTTPRefusal(r, http.StatusForbidden, "forbidden", "origin", "Origin not allowed", "")
				http.Error(w, fmt.Sprintf("forbidden: Origin %s is not in allowedOrigins and not loopback or in allowedHosts", quoteName(o)), http.StatusForbidden)
				return
			}
			if corsHeaders(w, r, o) {
				return // a preflight, answered
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) hostAllowed(hostport string) bool {
	_, ok := s.hostName(hostport)
	return ok
}

func (s *Server) originAllowed(origin string) bool {
	if slices.Contains(s.cfg.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return s.hostAllowed(u.Host)
}

// corsHeaders lets a page of an allowed origin (a browser-based client) read
// the answers, and the session header the cancellation scope travels in. It
// answers a preflight itself (it carries no token) and reports true then.
func corsHeaders(w http.ResponseWriter, r *http.Request, origin string) bool {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, WWW-Authenticate")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// openAccess reads the bearer token file and opens the OAuth verifier, as
// far as the config asks for either.
func openAccess(cfg config.Auth, log *slog.Logger, opts []Option) (token []byte, v *oauth.Verifier, err error) {
	if cfg.BearerTokenFile != "" {
		if token, err = readToken(cfg.BearerTokenFile); err != nil {
			return nil, nil, err
		}
	}
	if cfg.OAuth == nil {
		return token, nil, nil
	}
	o := oauth.Options{Config: *cfg.OAuth}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Logger == nil {
		o.Logger = log
	}
	if v, err = oauth.New(o); err != nil {
		return nil, nil, err
	}
	log.Info("oauth: protected resource", "issuer", cfg.OAuth.Issuer, "resources", cfg.OAuth.Resources, "scopes", v.Scopes())
	if cfg.BearerTokenFile == "" {
		log.Warn("oauth without auth.bearerTokenFile: mcpctl has no credential to verify /mcp with")
	}
	return token, v, nil
}

// listTools shows a token only the tools its scopes let it call: a hosted
// connector puts the list before a model, which should not plan with tools
// it would be refused. A call to a hidden tool still gets 403
// insufficient_scope naming the scope (step-up).
func (s *Server) listTools(ctx context.Context, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	res, err := next(ctx, "tools/list", req)
	var who *oauth.Identity
	if extra := req.GetExtra(); extra != nil {
		who = oauth.IdentityOf(extra.TokenInfo)
	}
	list, ok := res.(*mcp.ListToolsResult)
	if err != nil || !ok || list == nil || s.oauth == nil || who == nil || who.Operator {
		return res, err
	}
	shown := *list
	shown.Tools = nil
	for _, t := range list.Tools {
		if s.oauth.MayCall(who, t.Name) {
			shown.Tools = append(shown.Tools, t)
		}
	}
	if shown.Tools == nil {
		shown.Tools = []*mcp.Tool{}
	}
	return &shown, nil
}

// passIdentity hands the identity guard put in the request's context to
// the SDK, which carries it to tool middleware as TokenInfo.
func passIdentity(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
	id := oauth.IdentityFrom(ctx)
	if id == nil {
		return nil, auth.ErrInvalidToken
	}
	return id.TokenInfo(), nil
}
