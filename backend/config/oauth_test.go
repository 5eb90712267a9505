package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestOAuthValid(t *testing.T) {
	tests := []struct {
		name, in string
		check    func(*OAuth) bool
	}{
		{"no oauth key: off", `{}`, func(o *OAuth) bool { return o == nil }},
		{"https issuer, two tunnels, default scopes",
			`{"auth":{"oauth":{"issuer":"https://auth.example.com","resources":["https://a.example.com/mcp","https://b.example.com/mcp"]}}}`,
			func(o *OAuth) bool { return reflect.DeepEqual(o.Scopes, DefaultScopes()) && len(o.Resources) == 2 }},
		{"http on loopback, configured jwks and scopes",
			`{"auth":{"oauth":{"issuer":"http://127.0.0.1:9000","jwksUrl":"http://localhost:9000/jwks","resources":["http://127.0.0.1:3210/mcp"],"scopes":{"ops":["shell.exec","file.read"]}}}}`,
			func(o *OAuth) bool { return len(o.Scopes) == 1 && o.JWKSURL != "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if !tc.check(c.Auth.OAuth) {
				t.Fatalf("unexpected auth.oauth %+v", c.Auth.OAuth)
			}
		})
	}
}

func TestOAuthInvalid(t *testing.T) {
	const res = `"resources":["https://mcp.example.com/mcp"]`
	tests := []struct {
		name, in, want string
	}{
		{"http issuer off loopback", `{"issuer":"http://auth.example.com",` + res + `}`,
			`auth.oauth.issuer = "http://auth.example.com": must be https (http only on a loopback host)`},
		{"issuer missing", `{` + res + `}`, `auth.oauth.issuer = "": must be an absolute URL`},
		{"issuer with query", `{"issuer":"https://a.example.com/?x=1",` + res + `}`, `auth.oauth.issuer = "https://a.example.com/?x=1": must have no query`},
		{"jwks not a URL", `{"issuer":"https://a.example.com","jwksUrl":"keys.json",` + res + `}`, `auth.oauth.jwksUrl = "keys.json": must be an absolute URL`},
		{"no resource", `{"issuer":"https://a.example.com"}`, `auth.oauth.resources = []: must name at least one resource URL`},
		{"resource over http", `{"issuer":"https://a.example.com","resources":["http://mcp.example.com/mcp"]}`,
			`auth.oauth.resources[0] = "http://mcp.example.com/mcp": must be https`},
		{"resource twice", `{"issuer":"https://a.example.com","resources":["https://m.example.com/mcp","https://m.example.com/mcp"]}`,
			`auth.oauth.resources[1] = "https://m.example.com/mcp": is listed twice`},
		{"empty scopes", `{"issuer":"https://a.example.com",` + res + `,"scopes":{}}`, `auth.oauth.scopes = {}: must map at least one scope`},
		{"unknown tool", `{"issuer":"https://a.example.com",` + res + `,"scopes":{"mcp:read":["file.reed"]}}`,
			`auth.oauth.scopes["mcp:read"] = "file.reed": is not a tool; valid: system.info`},
		{"scope with a space", `{"issuer":"https://a.example.com",` + res + `,"scopes":{"mcp read":["file.read"]}}`,
			`auth.oauth.scopes["mcp read"] = "mcp read": a scope name must be printable ASCII`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(`{"auth":{"oauth":` + tc.in + `}}`))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Parse(strings.NewReader(`{"auth":{"oauth":{"issuer":"https://a.example.com","audience":"x"}}}`)); err == nil || !strings.Contains(err.Error(), `unknown key "audience"`) {
		t.Fatalf("unknown key in auth.oauth: err = %v", err)
	}
}
