package filepolicy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/etc/shadow", "/etc/shadow", true},
		{"/etc/shadow", "/etc/shadow-", false},
		{"/etc/shadow", "/etc/shadowx/y", false},
		{"/etc/mcpctl", "/etc/mcpctl/fleet/key", true}, // below a match
		{"/etc/ssh/ssh_host_*_key", "/etc/ssh/ssh_host_ed25519_key", true},
		{"/etc/ssh/ssh_host_*_key", "/etc/ssh/ssh_host_ed25519_key.pub", false},
		{"/**/.ssh/id_rsa", "/root/.ssh/id_rsa", true},
		{"/**/.ssh/id_rsa", "/home/u/.ssh/id_rsa", true},
		{"/**/.ssh/id_rsa", "/.ssh/id_rsa", true}, // ** is zero components too
		{"/**/.ssh/id_rsa", "/a/b/c/d/.ssh/id_rsa", true},
		{"/**/.ssh/id_rsa", "/home/u/.ssh/id_rsa.pub", false},
		{"/**/.ssh/id_rsa", "/home/u/ssh/id_rsa", false},
		{"/proc/*/environ", "/proc/1/environ", true},
		{"/proc/*/environ", "/proc/1/task/1/environ", false},
		{"/sys/kernel/tracing/**/trace_pipe*", "/sys/kernel/tracing/trace_pipe", true},
		{"/sys/kernel/tracing/**/trace_pipe*", "/sys/kernel/tracing/per_cpu/cpu0/trace_pipe_raw", true},
		{"/", "/anything", true},
	}
	for _, tc := range tests {
		if got := Match(tc.pattern, tc.path); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

func TestValidPattern(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"/etc/shadow", ""},
		{"/**/.ssh/id_*", ""},
		{"etc/shadow", "absolute"},
		{"/etc/../shadow", "clean path (/shadow)"},
		{"/etc/[", `component "[" is not a valid pattern`},
		{"/etc/\x01", "control characters"},
	}
	for _, tc := range tests {
		got := ValidPattern(tc.pattern)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("ValidPattern(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestCheck: each rule refuses by canonical path and, for files with more
// names than one, by inode; the rule is named; nil allows everything.
func TestCheck(t *testing.T) {
	d := t.TempDir()
	write := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := write(filepath.Join(d, "token"))
	stateFile := write(filepath.Join(d, "state", "sub", "f"))
	denied := write(filepath.Join(d, "keys", "k"))
	plain := write(filepath.Join(d, "plain"))
	link := func(p, name string) string {
		t.Helper()
		l := filepath.Join(d, name)
		if err := os.Link(p, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	tokenLink, stateLink, deniedLink := link(token, "t2"), link(stateFile, "s2"), link(denied, "k2")
	p := New(Options{
		SecretFiles:    []Secret{{Path: token, Rule: "auth.bearerTokenFile"}, {Path: filepath.Join(d, "later"), Rule: "the config file"}},
		SecretDirs:     []Secret{{Path: filepath.Join(d, "state"), Rule: "$STATE_DIRECTORY"}},
		SecretPatterns: []Secret{{Path: "/proc/*/mem", Rule: "process memory"}},
		Roots:          []string{d, "/proc"},
		Deny:           []string{filepath.Join(d, "keys")},
	})
	tests := []struct {
		name, path, rule string // rule "": allowed
	}{
		{"token", token, "auth.bearerTokenFile"},
		{"hard link to the token", tokenLink, "auth.bearerTokenFile"},
		{"secret not created yet", filepath.Join(d, "later"), "the config file"},
		{"in the state dir", stateFile, "$STATE_DIRECTORY"},
		{"the state dir", filepath.Join(d, "state"), "$STATE_DIRECTORY"},
		{"hard link into the state dir", stateLink, "$STATE_DIRECTORY"},
		{"denied", denied, "files.deny[0]"},
		{"hard link to a denied file", deniedLink, "files.deny[0]"},
		{"process memory", "/proc/1/mem", "process memory"},
		{"outside the roots", "/etc/hostname", "files.roots"},
		{"anonymous", "pipe:[123]", "files"},
		{"ordinary", plain, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ino *Inode
			var st unix.Stat_t
			if unix.Stat(tc.path, &st) == nil {
				ino = InodeOf(&st)
			}
			err := p.Check(tc.path, ino)
			var r *Refusal
			switch {
			case tc.rule == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.rule != "" && (!errors.As(err, &r) || !strings.HasPrefix(r.Rule, tc.rule)):
				t.Fatalf("got %v, want a refusal by %s", err, tc.rule)
			}
		})
	}
	t.Run("a hard link made after the index is refused once it is rebuilt", func(t *testing.T) {
		clock := time.Now()
		p.now = func() time.Time { return clock }
		late := link(write(filepath.Join(d, "keys", "late")), "late2")
		var st unix.Stat_t
		if err := unix.Stat(late, &st); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(linkIndexTTL)
		if err := p.Check(late, InodeOf(&st)); err == nil {
			t.Fatalf("%s (a hard link to a denied file) allowed after %s", late, linkIndexTTL)
		}
	})
	if err := (*Policy)(nil).Check("/etc/shadow", nil); err != nil {
		t.Fatalf("nil policy refused: %v", err)
	}
}

// TestPatternsCover: what one pattern covers, by path and through a hard
// link to a file it names (the policy's paths rules use it as files.deny
// does); an inode not given is judged by path alone.
func TestPatternsCover(t *testing.T) {
	d := t.TempDir()
	secret := filepath.Join(d, "keys", "id")
	if err := os.MkdirAll(filepath.Dir(secret), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(d, "link")
	if err := os.Link(secret, link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(d, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ps := NewPatterns([]string{"/nonexistent/**", filepath.Join(d, "k*")})
	inode := func(p string) *Inode {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return InodeOf(&st)
	}
	for _, tc := range []struct {
		name, path string
		st         *Inode
		want       int
	}{
		{"below a match", secret, inode(secret), 1},
		{"a hard link", link, inode(link), 1},
		{"a hard link by path alone", link, nil, -1},
		{"another file", plain, inode(plain), -1},
	} {
		if got := ps.Covers(tc.path, tc.st); got != tc.want {
			t.Errorf("%s: Covers = %d, want %d", tc.name, got, tc.want)
		}
	}
	if (*Patterns)(nil).Covers(secret, nil) != -1 {
		t.Error("nil patterns cover something")
	}
}
