package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/verify"
)

func installCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "first install on a clean host: release, current, config, units, tunnels, watchdog",
		Flags: buildFlags("mcp-backend binary to install"),
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
			rep, err := deploy.Install(c.Context, env, deploy.InstallOptions{Build: build, Version: c.String("version")})
			if warn := status.MemoryWarning(status.CgroupControllers); warn != "" && rep != nil {
				rep.Warnings = append(rep.Warnings, warn)
			}
			d.out.print(rep, func(w io.Writer, st styles) { humanInstall(w, st, rep, err) })
			if err != nil {
				return fmt.Errorf("install: %w", err)
			}
			return nil
		},
	}
}

func humanChecks(w io.Writer, st styles, title string, r *verify.Report) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "  %s %s\n", st.Title.Render(title), st.Dim.Render(r.Target))
	for _, ch := range r.Checks {
		line := fmt.Sprintf("    %s %-12s %7.1f ms", st.Verdict(ch.OK), ch.Name, ch.DurationMs)
		if ch.Err != "" {
			line += "  " + ch.Err
		}
		fmt.Fprintln(w, line)
	}
}

func humanSteps(w io.Writer, st styles, steps []deploy.Step) {
	for _, s := range steps {
		line := fmt.Sprintf("  %s %-40s %8.1f ms", st.Verdict(s.OK), s.Name, s.DurationMs)
		if s.Err != "" {
			line += "  " + s.Err
		}
		fmt.Fprintln(w, line)
	}
}

func humanInstall(w io.Writer, st styles, r *deploy.InstallReport, err error) {
	fmt.Fprintf(w, "%s %s %s\n", st.Title.Render("install"), r.Version, st.Verdict(err == nil && r.OK))
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  %s %s\n", st.Bad.Render("warning:"), warn)
	}
	for _, reason := range r.Plan.Refusals {
		fmt.Fprintf(w, "  %s %s\n", st.Bad.Render("refused:"), reason)
	}
	if r.Digest != "" {
		fmt.Fprintf(w, "  build %s\n", st.Dim.Render(r.Digest))
	}
	humanSteps(w, st, r.Steps)
	humanChecks(w, st, "backend", r.Backend)
	for _, t := range r.Tunnels {
		humanChecks(w, st, "tunnel", t)
	}
	if len(r.Undo) > 0 {
		fmt.Fprintf(w, "  %s\n", st.Title.Render("undo"))
		humanSteps(w, st, r.Undo)
		if r.UndoOK {
			fmt.Fprintln(w, "  the host is as it was before install: fix the cause and run install again")
		} else {
			fmt.Fprintf(w, "  %s the install could not be taken back completely: remove what the failed undo steps name by hand\n", st.Bad.Render("HUMAN NEEDED:"))
		}
	}
	if err != nil {
		fmt.Fprintf(w, "  %s %v\n", st.Bad.Render("error:"), err)
	}
}
