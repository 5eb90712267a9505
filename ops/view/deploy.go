package view

import (
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/verify"
)

// checks writes a verification's checks under title, a line each.
func checks(w io.Writer, st Styles, title string, r *verify.Report) {
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

// steps writes the steps a deploy took, a line each.
func steps(w io.Writer, st Styles, steps []deploy.Step) {
	for _, s := range steps {
		line := fmt.Sprintf("  %s %-40s %8.1f ms", st.Verdict(s.OK), s.Name, s.DurationMs)
		if s.Err != "" {
			line += "  " + s.Err
		}
		fmt.Fprintln(w, line)
	}
}

// Install writes the report of mcpctl install (err: how it ended).
func Install(w io.Writer, st Styles, r *deploy.InstallReport, err error) {
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
	steps(w, st, r.Steps)
	checks(w, st, "backend", r.Backend)
	for _, t := range r.Tunnels {
		checks(w, st, "tunnel", t)
	}
	if len(r.Undo) > 0 {
		fmt.Fprintf(w, "  %s\n", st.Title.Render("undo"))
		steps(w, st, r.Undo)
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

// Canary writes the report of mcpctl canary start (err: how it ended).
func Canary(w io.Writer, st Styles, r *deploy.CanaryReport, err error) {
	fmt.Fprintf(w, "%s %s %s %s\n", st.Title.Render("canary"), r.Version, st.Dim.Render(r.URL), st.Verdict(err == nil && r.Pass))
	for _, reason := range r.Plan.Refusals {
		fmt.Fprintf(w, "  %s %s\n", st.Bad.Render("refused:"), reason)
	}
	if r.Digest != "" {
		fmt.Fprintf(w, "  build %s\n", st.Dim.Render(r.Digest))
	}
	steps(w, st, r.Steps)
	checks(w, st, "canary", r.Canary)
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

// CanaryStatus writes what mcpctl canary status observed.
func CanaryStatus(w io.Writer, s Styles, st *deploy.CanaryStatus) {
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

// UnitInstall writes what unit install changed (each unit's diff,
// coloured on a terminal) or, dry, would change.
func (p *Printer) UnitInstall(w io.Writer, rep *deploy.UnitInstallReport) {
	r := p.R
	add := r.NewStyle().Foreground(lipgloss.Color("2"))
	del := r.NewStyle().Foreground(lipgloss.Color("1"))
	hdr := r.NewStyle().Bold(true)
	for _, ch := range rep.Changed {
		fmt.Fprintln(w, hdr.Render(fmt.Sprintf("%s %s", ch.Action, ch.Unit)))
		for _, line := range strings.SplitAfter(ch.Diff, "\n") {
			if line == "" {
				continue
			}
			text := strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "@@"):
				fmt.Fprintln(w, hdr.Render(text))
			case strings.HasPrefix(line, "+"):
				fmt.Fprintln(w, add.Render(text))
			case strings.HasPrefix(line, "-"):
				fmt.Fprintln(w, del.Render(text))
			default:
				fmt.Fprintln(w, text)
			}
		}
	}
	switch {
	case rep.DryRun:
		plan := "no daemon-reload"
		if len(rep.Changed) > 0 {
			plan = fmt.Sprintf("would write %d unit(s) to %s and daemon-reload", len(rep.Changed), rep.UnitDir)
		}
		fmt.Fprintf(w, "dry run: %s, %d unchanged; would enable at boot: %s\n", plan, len(rep.Unchanged), strings.Join(rep.Enabled, " "))
		if len(rep.LinkedSlots) > 0 {
			fmt.Fprintf(w, "would link the slots to the current release: %s\n", strings.Join(rep.LinkedSlots, " "))
		}
		if len(rep.Disabled) > 0 {
			fmt.Fprintf(w, "would disable at boot, if enabled (it serves until the next cutover hands it off): %s\n", strings.Join(rep.Disabled, " "))
		}
		fmt.Fprintln(w, "nothing was changed")
		return
	case len(rep.Changed) == 0:
		fmt.Fprintf(w, "units in %s are up to date (%d unchanged); no daemon-reload\n", rep.UnitDir, len(rep.Unchanged))
	default:
		fmt.Fprintf(w, "%d unit(s) written to %s, %d unchanged; systemd reloaded\n", len(rep.Changed), rep.UnitDir, len(rep.Unchanged))
	}
	fmt.Fprintf(w, "enabled at boot: %s\n", strings.Join(rep.Enabled, " "))
	if len(rep.LinkedSlots) > 0 {
		fmt.Fprintf(w, "slots linked to the current release: %s\n", strings.Join(rep.LinkedSlots, " "))
	}
	if len(rep.Disabled) > 0 {
		fmt.Fprintf(w, "disabled at boot (serves until the next cutover hands it off): %s\n", strings.Join(rep.Disabled, " "))
	}
}
