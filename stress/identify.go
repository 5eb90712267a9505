package stress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
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
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": 1, "method": "initialize",
		"params": map[string]any{
			"protocolVersion": ProtocolVersion,
			"capabilities":    map[string]any{},
			"clientInfo":      map[string]any{"name": "mcpctl-stress", "version": "1"},
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/mcp", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	req.Header = Headers()
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("initialize: HTTP %d: %s", resp.StatusCode, snippet(b))
	}
	msgs, err := Messages(resp.Header.Get("Content-Type"), b)
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	for _, m := range msgs {
		var r struct {
			Result *struct {
				ServerInfo struct {
					Version string `json:"version"`
				} `json:"serverInfo"`
			} `json:"result"`
		}
		if json.Unmarshal(m, &r) == nil && r.Result != nil {
			return r.Result.ServerInfo.Version, nil
		}
	}
	return "", fmt.Errorf("initialize: no result in %s", snippet(b))
}
