package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/notify"
)

// approvalsNotify is `mcpctl approvals notify`, what
// mcp-approvals-notify.service runs (package notify: when and how).
func approvalsNotify(c *cli.Context, d *deps) error {
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	dir := c.String("dir")
	if dir == "" {
		dir = cfg.ApprovalsDir()
	}
	st, err := approvals.Open(dir, nil)
	if err != nil {
		return withCode(deploy.CodeFailed, err)
	}
	failed, err := notify.Run(c.Context, d.logger, cfg.Approvals.Notify, cfg.StateDir, st)
	if err != nil {
		return withCode(deploy.CodeFailed, err)
	}
	if failed > 0 {
		return withCode(deploy.CodeFailed, fmt.Errorf("approvals notify: %d approval(s) not notified (see the log above)", failed))
	}
	return nil
}
