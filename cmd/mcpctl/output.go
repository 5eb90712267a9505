package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"
	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// output is how a command writes, resolved once per run (resolveOutput):
// JSON on stdout for scripts, or text styled with lipgloss for people, colour
// only on a terminal and never with --no-color or NO_COLOR.
type output struct {
	w     io.Writer
	json  bool
	color bool
	// wide lets tables and lines take the width they need; by default they
	// fit 80 columns.
	wide bool
	r    *lipgloss.Renderer
	st   styles
}

// styles are the few text styles every human form uses.
type styles struct {
	title, ok, warn, bad, dim lipgloss.Style
}

func (s styles) verdict(ok bool) string {
	if ok {
		return s.ok.Render("PASS")
	}
	return s.bad.Render("FAIL")
}

// newOutput styles w: colour only on a terminal, never with noColor.
func newOutput(w io.Writer, asJSON, noColor bool) *output {
	r := lipgloss.NewRenderer(w)
	f, isFile := w.(*os.File)
	color := !noColor && isFile && term.IsTerminal(int(f.Fd()))
	if !color {
		r.SetColorProfile(termenv.Ascii)
	}
	return &output{w: w, json: asJSON, color: color, r: r, st: styles{
		title: r.NewStyle().Bold(true),
		ok:    r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		warn:  r.NewStyle().Foreground(lipgloss.Color("3")).Bold(true),
		bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		dim:   r.NewStyle().Faint(true),
	}}
}

// resolveOutput is the one place the output flags are read: --json and
// --no-color before or after the command (the command's own --json, then the
// global one), NO_COLOR having been folded into --no-color by the app.
func resolveOutput(c *cli.Context, d *deps) *output {
	var asJSON, noColor, wide bool
	for _, x := range c.Lineage() {
		asJSON = asJSON || x.Bool("json")
		noColor = noColor || x.Bool("no-color")
		wide = wide || x.Bool("wide")
	}
	o := newOutput(d.stdout, asJSON, noColor)
	o.wide = wide
	return o
}

// textWidth is the width human output fits by default.
const textWidth = 80

// width is the width tables and lines must fit, 0 for any (--wide).
func (o *output) width() int {
	if o.wide {
		return 0
	}
	return textWidth
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// print writes v as JSON with --json, else its human form.
func (o *output) print(v any, human func(io.Writer, styles)) {
	if o.json {
		_ = writeJSON(o.w, v)
		return
	}
	human(o.w, o.st)
}

// printText is print for a human form that needs no styles.
func (o *output) printText(v any, human func(io.Writer)) {
	o.print(v, func(w io.Writer, _ styles) { human(w) })
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonFlag is --json as every command accepts it after its name (scripts
// write it there); each command needs its own value, urfave/cli keeps state
// in it.
func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "machine-readable output on stdout"}
}

// withOutput gives every command --json and resolves the output once before
// its action runs.
func withOutput(d *deps, cmds []*cli.Command) []*cli.Command {
	for _, cmd := range cmds {
		if cmd.Action != nil {
			if cliargs.Flag(cmd.Flags, "json") == nil {
				cmd.Flags = append(cmd.Flags, jsonFlag())
			}
			action := cmd.Action
			cmd.Action = func(c *cli.Context) error {
				d.out = resolveOutput(c, d)
				return action(c)
			}
		}
		withOutput(d, cmd.Subcommands)
	}
	return cmds
}

// table draws a lipgloss table: rounded borders on a colour terminal,
// space-separated columns otherwise (easy to read and to grep).
func (o *output) table(headers []string, rows [][]string) string {
	t := table.New().Headers(headers...).Rows(rows...)
	if !o.color || o.r.ColorProfile() == termenv.Ascii {
		out := t.Border(lipgloss.HiddenBorder()).BorderTop(false).BorderBottom(false).
			BorderLeft(false).BorderRight(false).BorderHeader(false).
			StyleFunc(func(_, _ int) lipgloss.Style { return o.r.NewStyle().PaddingRight(1) }).String()
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return strings.Join(lines, "\n")
	}
	header := o.r.NewStyle().Bold(true).Padding(0, 1)
	cell := o.r.NewStyle().Padding(0, 1)
	return t.Border(lipgloss.RoundedBorder()).BorderStyle(o.r.NewStyle().Foreground(lipgloss.Color("8"))).
		StyleFunc(func(row, _ int) lipgloss.Style {
			if row == table.HeaderRow {
				return header
			}
			return cell
		}).String()
}
