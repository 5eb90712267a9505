package filepolicy_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/filepolicy"
)

// BenchmarkCheck is what the policy costs a file call with the default
// deny list and a few secrets: for a file with one name, and for one with
// two (the hard-link search expands the patterns and scans the secret
// directories).
func BenchmarkCheck(b *testing.B) {
	d := b.TempDir()
	f := filepath.Join(d, "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		b.Fatal(err)
	}
	c := config.Default()
	opts := filepolicy.Options{
		SecretFiles: []filepolicy.Secret{{Path: filepath.Join(d, "token"), Rule: "auth.bearerTokenFile"}, {Path: filepath.Join(d, "config.json"), Rule: "the config file"}},
		SecretDirs:  []filepolicy.Secret{{Path: "/var/lib/mcpctl", Rule: "the mcpctl state directory"}},
		Roots:       c.Files.Roots, Deny: c.Files.Deny,
	}
	p := filepolicy.New(opts)
	for _, tc := range []struct {
		name  string
		links int
		fresh bool // a new policy each time: the hard-link index is built
	}{{"one name", 0, false}, {"hard-linked", 1, false}, {"hard-linked, index built", 1, true}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.links > 0 {
				if err := os.Link(f, filepath.Join(d, "f2")); err != nil && !os.IsExist(err) {
					b.Fatal(err)
				}
			}
			var st unix.Stat_t
			if err := unix.Stat(f, &st); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if tc.fresh {
					p = filepolicy.New(opts)
				}
				if err := p.Check(f, filepolicy.InodeOf(&st)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
