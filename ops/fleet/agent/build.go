package agent

import (
	"fmt"
	"os"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/release"
)

// Build is the build a fleet rollout uploads to every host and installs
// there as release Version.
type Build struct {
	Path, Digest, Version string
	Size                  int64
}

// CheckBuild checks mcpctl fleet's --build and --version before any host
// is contacted: path (absolute; given is how the operator wrote it, for
// the message) an existing regular file, version a name a release may
// have and a plain word on the remote command line it reaches. A bad one
// is a usage error (exit 2); a build that cannot be read is not.
func CheckBuild(path, given, version string) (*Build, error) {
	usage := func(format string, args ...any) error {
		return &deploy.Error{Code: deploy.CodeUsage, Err: fmt.Errorf(format, args...)}
	}
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil, usage("--build %q: not a regular file (%v)", given, err)
	}
	if err := release.ValidateVersion(version); err != nil {
		return nil, usage("--version %q: %v", version, err)
	}
	if err := CheckWord(version); err != nil {
		return nil, usage("--version %q: %v", version, err)
	}
	digest, err := buildinfo.FileDigest(path)
	if err != nil {
		return nil, err
	}
	return &Build{Path: path, Digest: digest, Version: version, Size: st.Size()}, nil
}
