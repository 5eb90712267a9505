package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/outcome"
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
					d.out.print(rep, func(w io.Writer, st styles) { humanCanary(w, st, rep, err) })
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
					d.out.print(st, func(w io.Writer, s styles) { humanCanaryStatus(w, s, st) })
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

func humanCanary(w io.Writer, st styles, r *deploy.CanaryReport, err error) {
	fmt.Fprintf(w, "%s %s %s %s\n", st.Title.Render("canary"), r.Version, st.Dim.Render(r.URL), st.Verdict(err == nil && r.Pass))
	for _, reason := range r.Plan.Refusals {
		fmt.Fprintf(w, "  %s %s\n", st.Bad.Render("refused:"), reason)
	}
	if r.Digest != "" {
		fmt.Fprintf(w, "  build %s\n", st.Dim.Render(r.Digest))
	}
	humanSteps(w, st, r.Steps)
	humanChecks(w, st, "canary", r.Canary)
	p := r.Production
	if p.Before.MainPID != 0 {
		fmt.Fprintf(w, "  %s %s %s\n", st.Title.Render("production"), p.Unit, st.Verdict(len(p.Problems()) == 0))
		fmt.Fprintf(w, "    MainPID      %d -> %d\n", p.Before.MainPID, p.After.MainPID)
		fmt.Fprintf(w, "    InvocationID %s -> %s\n", p.Before.InvocationID, p.After.InvocationID)
		fmt.Fprintf(w, "    /healthz     %d samples, %d failures\n", p.HealthzSamples, p.HealthzFailures)
	}
	if err != nil {
		fmt.Fprintf(w, "  %s %v\n", st.Bad.Render("error:"), err)
	}
}

func humanCanaryStatus(w io.Writer, s styles, st *deploy.CanaryStatus) {
	fmt.Fprintf(w, "%s %s %s/%s\n", s.Title.Render("canary"), st.Unit, st.ActiveState, st.SubState)
	if st.Record != nil {
		fmt.Fprintf(w, "  release %s %s started %s verdict %s\n", st.Record.Version, s.Dim.Render(st.Record.Digest), st.Record.Started.Format("2006-01-02 15:04:05"), s.Verdict(st.Record.Pass))
	}
	if st.MainPID != 0 {
		fmt.Fprintf(w, "  MainPID %d, restarts %d, since %s\n", st.MainPID, st.NRestarts, st.Since.Format("2006-01-02 15:04:05"))
		fmt.Fprintf(w, "  %s /healthz %d, /readyz %d, serving %s\n", s.Dim.Render(st.URL), st.Healthz, st.Readyz, st.Version)
	}
	if st.Err != "" {
		fmt.Fprintf(w, "  %s %s\n", s.Bad.Render("error:"), st.Err)
	}
}
