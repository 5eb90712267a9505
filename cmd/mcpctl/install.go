package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/verify"
)

func installCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "first install on a clean host: release, current, config, units, tunnels, watchdog",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "build", Usage: "mcp-backend binary to install (`PATH`)"},
			&cli.StringFlag{Name: "version", Usage: "release version; must be what --build --version prints (the default)"},
			&cli.BoolFlag{Name: "json", Usage: "machine-readable output on stdout"},
		},
		Action: func(c *cli.Context) error {
			if c.String("build") == "" {
				return usageError("install: --build PATH is required")
			}
			env, done, err := deployEnv(c, d)
			if err != nil {
				return err
			}
			defer done()
			build, _ := filepath.Abs(c.String("build"))
			rep, err := deploy.Install(c.Context, env, deploy.InstallOptions{Build: build, Version: c.String("version")})
			deployPrint(c, d, rep, func(w io.Writer, st deployStyles) { humanInstall(w, st, rep, err) })
			if err != nil {
				return fmt.Errorf("install: %w", err)
			}
			return nil
		},
	}
}

// deployEnv loads mcpctl.json and connects to systemd for install and
// canary.
func deployEnv(c *cli.Context, d *deps) (*deploy.Env, func(), error) {
	log := d.logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := connectOps(c, true, log)
	if err != nil {
		return nil, nil, err
	}
	return &deploy.Env{Config: b.cfg, Systemd: b.sd, Verify: b.verify, Logger: log, MCPCtl: b.self, MCPCtlConfig: b.cfgPath}, b.sd.Close, nil
}

// deployFlag is true when name is set on the command or any parent.
func deployFlag(c *cli.Context, name string) bool {
	for _, x := range c.Lineage() {
		if x.Bool(name) {
			return true
		}
	}
	return false
}

type deployStyles struct {
	title, ok, bad, dim lipgloss.Style
}

func newDeployStyles(c *cli.Context, w io.Writer) deployStyles {
	return stylesFor(w, deployFlag(c, "no-color"))
}

// stylesFor styles output to w: colour only on a terminal, never with
// noColor.
func stylesFor(w io.Writer, noColor bool) deployStyles {
	r := lipgloss.NewRenderer(w)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	return deployStyles{
		title: r.NewStyle().Bold(true),
		ok:    r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		dim:   r.NewStyle().Faint(true),
	}
}

func (s deployStyles) verdict(ok bool) string {
	if ok {
		return s.ok.Render("PASS")
	}
	return s.bad.Render("FAIL")
}

// deployPrint writes v as JSON with --json, else the human form.
func deployPrint(c *cli.Context, d *deps, v any, human func(io.Writer, deployStyles)) {
	if deployFlag(c, "json") {
		enc := json.NewEncoder(d.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return
	}
	human(d.stdout, newDeployStyles(c, d.stdout))
}

func humanChecks(w io.Writer, st deployStyles, title string, r *verify.Report) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "  %s %s\n", st.title.Render(title), st.dim.Render(r.Target))
	for _, ch := range r.Checks {
		line := fmt.Sprintf("    %s %-12s %7.1f ms", st.verdict(ch.OK), ch.Name, ch.DurationMs)
		if ch.Err != "" {
			line += "  " + ch.Err
		}
		fmt.Fprintln(w, line)
	}
}

func humanSteps(w io.Writer, st deployStyles, steps []deploy.Step) {
	for _, s := range steps {
		line := fmt.Sprintf("  %s %-40s %8.1f ms", st.verdict(s.OK), s.Name, s.DurationMs)
		if s.Err != "" {
			line += "  " + s.Err
		}
		fmt.Fprintln(w, line)
	}
}

func humanInstall(w io.Writer, st deployStyles, r *deploy.InstallReport, err error) {
	fmt.Fprintf(w, "%s %s %s\n", st.title.Render("install"), r.Version, st.verdict(err == nil && r.OK))
	for _, reason := range r.Plan.Refusals {
		fmt.Fprintf(w, "  %s %s\n", st.bad.Render("refused:"), reason)
	}
	if r.Digest != "" {
		fmt.Fprintf(w, "  build %s\n", st.dim.Render(r.Digest))
	}
	humanSteps(w, st, r.Steps)
	humanChecks(w, st, "backend", r.Backend)
	for _, t := range r.Tunnels {
		humanChecks(w, st, "tunnel", t)
	}
	if len(r.Undo) > 0 {
		fmt.Fprintf(w, "  %s\n", st.title.Render("undo"))
		humanSteps(w, st, r.Undo)
		if r.UndoOK {
			fmt.Fprintln(w, "  the host is as it was before install: fix the cause and run install again")
		} else {
			fmt.Fprintf(w, "  %s the install could not be taken back completely: remove what the failed undo steps name by hand\n", st.bad.Render("HUMAN NEEDED:"))
		}
	}
	if err != nil {
		fmt.Fprintf(w, "  %s %v\n", st.bad.Render("error:"), err)
	}
}
