//go:build testhooks

package main

import (
	"context"

	"github.com/overdeck/mcp-backend/ops/deploy"
)

// The container tests build mcpctl with -tags testhooks
// (nspawntest.BuildBinary): deploy.PauseEnv then stops a cutover at a
// named point of its takeover, to kill mcpctl exactly there.
func init() {
	testPause = func(d *deps) func(ctx context.Context, point string) {
		spec := d.getenv(deploy.PauseEnv)
		if spec == "" {
			return nil
		}
		return deploy.PauseAt(spec, d.logger)
	}
}
