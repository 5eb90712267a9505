package server

import (
	"strings"
	"testing"
)

func TestCheckHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.1:3210", true},
		{"localhost:1", true},
		{"localhost:65535", true},
		{"[::1]", true},
		{"[::1]:443", true},
		{"mcp.example.com", true},
		{"mcp.example.com.:8443", true},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
		{"127.0.0.1:", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:+80", false},
		{"127.0.0.1:-1", false},
		{"127.0.0.1:0080", true}, // decimal, in range
		{"127.0.0.1:000080", false},
		{"127.0.0.1:x", false},
		{"127.0.0.1:80:80", false},
		{"::1", false},
		{"[::1", false},
		{"[::1]x", false},
		{"[::1]:", false},
		{"127.0.0.1:" + strings.Repeat("9", 60<<10), false},
	} {
		if got := checkHost(tc.host) == ""; got != tc.ok {
			t.Errorf("checkHost(%.40q) accepts = %v, want %v (%s)", tc.host, got, tc.ok, checkHost(tc.host))
		}
	}
}

func TestStableReason(t *testing.T) {
	for in, want := range map[string]string{
		`unknown signing key "` + strings.Repeat("k", 5000) + `"`:  `unknown signing key "…"`,
		`issuer "https://e\"vil" is not the configured one`:        `issuer "…" is not the configured one`,
		`audience ["a" "b"] holds none of this server's resources`: `audience ["…" "…"] holds none of this server's resources`,
		`cut "` + strings.Repeat("k", 50):                          `cut "…"`,
		"wrong token":                                              "wrong token",
		"":                                                         "",
		strings.Repeat("x", 500):                                   strings.Repeat("x", maxReasonBytes),
	} {
		if got := stableReason(in); got != want {
			t.Errorf("stableReason(%.40q) = %.40q, want %.40q", in, got, want)
		}
	}
}
