package server

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
)

// guard refuses requests that a local server must not answer: a Host that is
// neither loopback nor an allowed public name, an Origin that is present and
// not allowed (DNS rebinding), and, with auth on, a missing or wrong token.
func (s *Server) guard(h http.Handler) http.Handler {
	return s.hostGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != nil && !s.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-backend"`)
			http.Error(w, "unauthorized: a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// hostGuard refuses a Host that is neither loopback nor allowed, and an
// Origin that is present and not allowed (DNS rebinding).
func (s *Server) hostGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not loopback or in allowedHosts", r.Host), http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if !s.originAllowed(o) {
				http.Error(w, fmt.Sprintf("forbidden: Origin %q is not in allowedOrigins and not loopback or in allowedHosts", o), http.StatusForbidden)
				return
			}
			if corsHeaders(w, r, o) {
				return // a preflight, answered
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), s.token) == 1
}

func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if isLoopbackHost(host) {
		return true
	}
	for _, a := range s.cfg.AllowedHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
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

// readToken reads the bearer token and refuses a file others can read.
func readToken(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth.bearerTokenFile: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("auth.bearerTokenFile = %q: mode %04o is group/world accessible; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth.bearerTokenFile: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return nil, fmt.Errorf("auth.bearerTokenFile = %q: token is %d characters, want at least 16", path, len(tok))
	}
	return []byte(tok), nil
}
