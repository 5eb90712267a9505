package units

import (
	"strings"
	"testing"
)

// TestRenderChecksValuesItself: rendering refuses a value with a control
// character even if it got past Validate, so no caller can write a unit with
// a directive of its own making.
func TestRenderChecksValuesItself(t *testing.T) {
	type inner struct{ MemoryHigh string }
	tests := []struct {
		name string
		data any
		want string
	}{
		{"clean", struct {
			Exec string
			G    inner
		}{"/bin/x --listen 127.0.0.1:1", inner{"6G"}}, ""},
		{"newline", struct{ Exec string }{"/bin/x\nUser=root"}, `Exec = "/bin/x\nUser=root": must not contain control characters`},
		{"in a nested struct", struct{ G inner }{inner{"6G\nMemoryMax=infinity"}}, `MemoryHigh = "6G\nMemoryMax=infinity"`},
		{"invalid UTF-8", struct{ Name string }{"a\xffb"}, `must not contain control characters`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkValues("x.service", tc.data)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestExecLine: each argument stays one ExecStart argument. Plain words go
// unquoted (the golden units keep their look); the rest is quoted so that a
// space cannot add an argument and %/$ expand nothing.
func TestExecLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"plain", []string{"/opt/mcp-backend/current/mcp-backend", "serve", "--config", "/etc/mcp-backend/config.json", "--listen", "[::1]:3210"},
			"/opt/mcp-backend/current/mcp-backend serve --config /etc/mcp-backend/config.json --listen [::1]:3210"},
		{"space", []string{"/bin/x", "--listen", "127.0.0.1 --config /tmp/evil:1"}, `/bin/x --listen "127.0.0.1 --config /tmp/evil:1"`},
		{"quote and backslash", []string{"/bin/x", `a"b\c`}, `/bin/x "a\"b\\c"`},
		{"specifier and variable", []string{"/bin/x", "%n$HOME"}, `/bin/x "%%n$$HOME"`},
		{"empty", []string{"/bin/x", ""}, `/bin/x ""`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := execLine(tc.args...); got != tc.want {
				t.Fatalf("execLine = %s, want %s", got, tc.want)
			}
		})
	}
}
