package server

import (
	"fmt"
	"os"
	"strings"

	"github.com/overdeck/mcp-backend/backend/config"
)

// Preflight is every check of a valid config that serve makes before it
// listens and that depends on more than the file itself: a non-loopback
// listen needs the static token, and the token file must exist, be readable
// by its owner only and hold a token of at least 16 characters.
// check-config runs exactly this, so a config it passes is one serve starts
// with (a taken port aside).
func Preflight(cfg config.Config) error {
	if !cfg.IsLoopback() && cfg.Auth.BearerTokenFile == "" {
		return fmt.Errorf("listen = %q is not loopback: set auth.bearerTokenFile or listen on 127.0.0.1", cfg.Listen)
	}
	if cfg.Auth.BearerTokenFile != "" {
		if _, err := readToken(cfg.Auth.BearerTokenFile); err != nil {
			return err
		}
	}
	if _, err := resolveSandboxes(cfg, fileOptions(cfg, osGetenv, cfg.Jobs.StateDir)); err != nil {
		return err
	}
	return nil
}

// MinTokenLen is the shortest static bearer token accepted.
const MinTokenLen = 16

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
	if len(tok) < MinTokenLen {
		return nil, fmt.Errorf("auth.bearerTokenFile = %q: token is %d characters, want at least %d", path, len(tok), MinTokenLen)
	}
	return []byte(tok), nil
}
