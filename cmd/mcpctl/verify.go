package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
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
			env, closeEnv, err := deployEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			fails := deploy.Check(c.Context, env, what != "tunnels", what != "backend")
			type result struct {
				What     string   `json:"what"`
				OK       bool     `json:"ok"`
				Failures []string `json:"failures"`
			}
			d.out.printText(result{what, len(fails) == 0, fails}, func(w io.Writer) {
				if len(fails) == 0 {
					fmt.Fprintf(w, "verify %s: ok\n", what)
					return
				}
				fmt.Fprintf(w, "verify %s: FAILED\n  - %s\n", what, strings.Join(fails, "\n  - "))
			})
			if len(fails) > 0 {
				return withCode(deploy.CodeFailed, fmt.Errorf("verify %s: %d failure(s)", what, len(fails)))
			}
			return nil
		},
	}
}
