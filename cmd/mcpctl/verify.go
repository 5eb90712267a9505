package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/verify"
)

func verifyCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "verify production now: backend, tunnels or all",
		UsageText: "mcpctl verify [backend|tunnels|all]",
		ArgsUsage: "[backend|tunnels|all]",
		Action: func(c *cli.Context) error {
			what := c.Args().First()
			if what == "" {
				what = "all"
			}
			if c.NArg() > 1 || (what != "backend" && what != "tunnels" && what != "all") {
				return usageError("verify %q: want backend, tunnels or all", strings.Join(c.Args().Slice(), " "))
			}
			b, err := connectOpsDegraded(c, false, d.logger)
			if err != nil {
				return err
			}
			var fails, unchecked []string
			switch {
			case b.sd != nil:
				defer b.sd.Close()
				env := &deploy.Env{Config: b.cfg, Systemd: b.sd, Verify: b.verify, Logger: d.logger, MCPCtl: b.self, MCPCtlConfig: b.cfgPath}
				fails = deploy.Check(c.Context, env, what != "tunnels", what != "backend")
			case what == "backend":
				// Without systemd: the HTTP checks, and say what was not
				// checked. Not a pass: the unit and its socket are unknown.
				for _, f := range b.verify.Backend(c.Context, "http://"+b.cfg.Backend.Listen, verify.Expect{}).Failed() {
					fails = append(fails, "backend "+f.Name+": "+f.Err)
				}
				unchecked = []string{"the backend unit and its socket unit (need systemd, not reachable: " + b.sdErr.Error() + ")"}
			default:
				return withCode(outcome.Failed, fmt.Errorf("verify %s: the tunnel checks compare unit runs and need systemd, not reachable: %w; `mcpctl verify backend` runs its HTTP checks without it", what, b.sdErr))
			}
			type result struct {
				What      string   `json:"what"`
				OK        bool     `json:"ok"`
				Failures  []string `json:"failures"`
				Unchecked []string `json:"unchecked,omitempty"`
				// Warnings are guardrails this host does not enforce; they
				// do not fail the verification.
				Warnings []string `json:"warnings,omitempty"`
			}
			var warnings []string
			if warn := status.MemoryWarning(status.CgroupControllers); warn != "" && what != "tunnels" {
				warnings = append(warnings, warn)
			}
			ok := len(fails) == 0 && len(unchecked) == 0
			d.out.printText(result{what, ok, fails, unchecked, warnings}, func(w io.Writer) {
				for _, warn := range warnings {
					fmt.Fprintf(w, "warning: %s\n", warn)
				}
				switch {
				case ok:
					fmt.Fprintf(w, "verify %s: ok\n", what)
				case len(fails) == 0:
					fmt.Fprintf(w, "verify %s: HTTP checks ok, INCOMPLETE\n", what)
				default:
					fmt.Fprintf(w, "verify %s: FAILED\n  - %s\n", what, strings.Join(fails, "\n  - "))
				}
				for _, u := range unchecked {
					fmt.Fprintf(w, "  not checked: %s\n", u)
				}
			})
			switch {
			case len(fails) > 0:
				return withCode(outcome.Failed, fmt.Errorf("verify %s: %d failure(s)", what, len(fails)))
			case len(unchecked) > 0:
				return withCode(outcome.Failed, fmt.Errorf("verify %s: incomplete without systemd", what))
			}
			return nil
		},
	}
}
