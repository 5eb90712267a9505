package stress

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/mcpclient"
)

// Build identifies what was stressed, for the verdict record.
type Build struct {
	Digest   string `json:"digest,omitempty"` // sha256:<hex> of the running executable
	Version  string `json:"version,omitempty"`
	Recorded bool   `json:"recorded"`
	Note     string `json:"note,omitempty"`
}

// ExeDigest returns "sha256:<hex>" of the executable process pid runs. It
// reads /proc/PID/exe, so it names the build actually running even if the
// file on disk was replaced since.
func ExeDigest(pid uint32) (string, error) {
	if pid == 0 {
		return "", fmt.Errorf("exe digest: pid 0: the unit has no main process")
	}
	// The same digest ops/candidate takes of a build file.
	return buildinfo.FileDigest("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/exe")
}

// ServerVersion asks the target for its serverInfo with an initialize
// request (allowed, and harmless, on a stateless server).
func ServerVersion(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := &mcpclient.Client{HTTP: &http.Client{Transport: &http.Transport{Proxy: nil}}}
	info, err := c.Initialize(ctx, base, "mcpctl-stress")
	if err != nil {
		return "", err
	}
	return info.Version, nil
}
