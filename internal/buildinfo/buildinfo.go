// Package buildinfo holds the version stamp of a build and the digest of the
// running executable, so that a deploy can prove which build is serving.
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
)

// Version is set at link time: -ldflags "-X github.com/overdeck/mcp-backend/internal/buildinfo.Version=v1.2.3".
var Version = "dev"

// Commit is set at link time to the VCS revision, when known.
var Commit = ""

var (
	digestOnce sync.Once
	digest     string
)

// ExecutableDigest returns "sha256:<hex>" of the running executable, computed
// once. It is empty when the executable cannot be read.
func ExecutableDigest() string {
	digestOnce.Do(func() {
		p, err := os.Executable()
		if err != nil {
			return
		}
		d, err := FileDigest(p)
		if err != nil {
			return
		}
		digest = d
	})
	return digest
}

// FileDigest returns "sha256:<hex>" of the file at path.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// String is the one-line version used by --version.
func String(prog string) string {
	s := prog + " " + Version
	if Commit != "" {
		s += " (" + Commit + ")"
	}
	return s
}
