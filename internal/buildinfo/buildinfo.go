// Package buildinfo holds the version stamp of a build and the digest of the
// running executable, so that a deploy can prove which build is serving.
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
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

// Info is what the build knows about itself: the stamped version, and what
// the Go toolchain recorded (module version, VCS revision and time, Go
// version). Fields it did not record are empty.
type Info struct {
	Version   string `json:"version"`
	Module    string `json:"module"`
	ModuleVer string `json:"moduleVersion"`
	Revision  string `json:"revision"`
	Time      string `json:"time"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
}

// Read returns the Info of the running binary.
func Read() Info {
	i := Info{Version: Version, Revision: Commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	i.Module, i.ModuleVer, i.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if i.Revision == "" {
				i.Revision = s.Value
			}
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Long is the version text of --version and `mcpctl version`: the first
// line is what candidate checks parse ("PROG version V"), the rest the
// build's provenance.
func Long(prog string) string {
	i := Read()
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	rev := or(i.Revision, "unknown")
	if i.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("%s version %s\nmodule:   %s %s\nrevision: %s\ntime:     %s\ngo:       %s\n",
		prog, i.Version, or(i.Module, "unknown"), or(i.ModuleVer, "(unknown)"), rev, or(i.Time, "unknown"), i.GoVersion)
}
