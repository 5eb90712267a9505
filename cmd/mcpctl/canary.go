package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/view"
)

func canaryCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "canary",
		Usage: "run a candidate build beside production on the canary port",
		Subcommands: []*cli.Command{
			{
				Name:  "start",
				Usage: "check, install as a release and start the candidate as the canary; prove production untouched",
				Flags: buildFlags("candidate mcp-backend binary"),
				Action: func(c *cli.Context) error {
					build, err := buildArg(c)
					if err != nil {
						return err
					}
					env, done, err := deployEnv(c, d, true)
					if err != nil {
						return err
					}
					defer done()
					rep, err := deploy.CanaryStart(c.Context, env, deploy.CanaryOptions{Build: build, Version: c.String("version")})
					d.out.print(rep, func(w io.Writer, st styles) { view.Canary(w, st, rep, err) })
					if err != nil {
						return fmt.Errorf("canary start: %w", err)
					}
					return nil
				},
			},
			{
				Name:  "status",
				Usage: "show the canary unit, its release and its health",
				Action: func(c *cli.Context) error {
					env, done, err := deployEnv(c, d, true)
					if err != nil {
						return err
					}
					defer done()
					st, err := deploy.Status(c.Context, env)
					if err != nil {
						return withCode(outcome.Failed, fmt.Errorf("canary status: %w", err))
					}
					d.out.print(st, func(w io.Writer, s styles) { view.CanaryStatus(w, s, st) })
					return nil
				},
			},
			{
				Name:  "stop",
				Usage: "stop the canary and remove its release unless it is current",
				Action: func(c *cli.Context) error {
					env, done, err := deployEnv(c, d, true)
					if err != nil {
						return err
					}
					defer done()
					rep, err := deploy.Stop(c.Context, env)
					d.out.print(rep, func(w io.Writer, s styles) {
						fmt.Fprintf(w, "%s %s %s\n", s.Title.Render("canary stop"), rep.Unit, s.Verdict(err == nil))
						if rep.Version != "" {
							if rep.ReleaseRemoved {
								fmt.Fprintf(w, "  release %s removed\n", rep.Version)
							} else {
								fmt.Fprintf(w, "  release %s kept: %s\n", rep.Version, rep.KeptReason)
							}
						}
					})
					if err != nil {
						return withCode(outcome.Failed, fmt.Errorf("canary stop: %w", err))
					}
					return nil
				},
			},
		},
	}
}
