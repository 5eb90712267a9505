package oauth

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// wellKnown is the RFC 9728 metadata path; a resource with a path has its
// metadata at wellKnown + path (/mcp gives wellKnown + "/mcp").
const wellKnown = "/.well-known/oauth-protected-resource"

// MetadataPaths are the paths MetadataHandler answers: the bare form and
// the path-suffixed form of every configured resource.
func (v *Verifier) MetadataPaths() []string {
	paths := []string{wellKnown}
	for _, r := range v.resources {
		if p := strings.TrimPrefix(r.meta, metaBase(r.meta)); p != wellKnown && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	return paths
}

// MetadataHandler serves the protected-resource metadata of the resource
// the request's Host belongs to (each tunnel is its own public URL, and a
// client checks that the metadata names the URL it used).
func (v *Verifier) MetadataHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Public information that browser-based clients read too.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, OPTIONS")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, OPTIONS")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		res := v.resourceFor(r.Host)
		meta := oauthex.ProtectedResourceMetadata{
			Resource:               res.id,
			AuthorizationServers:   []string{v.issuer},
			ScopesSupported:        v.Scopes(),
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "mcp-backend",
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_ = json.NewEncoder(w).Encode(meta)
	})
}

// resourceFor returns the configured resource whose host is host, or the
// first one (a request on the loopback address, or a tunnel that forwards
// a Host of its own).
func (v *Verifier) resourceFor(host string) resource {
	k := hostKey(host)
	for _, r := range v.resources {
		if r.host == k {
			return r
		}
	}
	return v.resources[0]
}

// Challenge answers a refused request: status (401 or 403), the
// WWW-Authenticate challenge clients discover the authorization server
// from (RFC 6750 and RFC 9728), and a short plain-text body. code is "" for
// a request that carried no credentials, else invalid_request,
// invalid_token or insufficient_scope; scopes are those to ask for.
func (v *Verifier) Challenge(w http.ResponseWriter, r *http.Request, status int, code, description string, scopes []string) {
	params := []string{"resource_metadata=" + quote(v.resourceFor(r.Host).meta)}
	if len(scopes) > 0 {
		params = append(params, "scope="+quote(strings.Join(scopes, " ")))
	}
	if code != "" {
		params = append(params, "error="+quote(code))
		if description != "" {
			params = append(params, "error_description="+quote(description))
		}
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
	w.Header().Set("Cache-Control", "no-store")
	msg := "unauthorized: a valid bearer token is required"
	if status == http.StatusForbidden {
		msg = "forbidden"
	}
	if description != "" {
		msg += ": " + description
	}
	http.Error(w, msg, status)
}

// quote makes an RFC 9110 quoted-string; descriptions are ours and
// printable, but a claim value quoted into one may hold anything.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ' || r > '~':
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func hostKey(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

func trimSlash(p string) string { return strings.TrimSuffix(p, "/") }

// metaBase is scheme://host of a metadata URL.
func metaBase(u string) string {
	i := strings.Index(u, "://")
	if j := strings.IndexByte(u[i+3:], '/'); j >= 0 {
		return u[:i+3+j]
	}
	return u
}
