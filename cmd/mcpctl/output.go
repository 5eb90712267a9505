package main

import (
	"encoding/json"
	"io"
	"os"

	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/overdeck/mcp-backend/ops/view"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// output is how a command writes, resolved once per run (resolveOutput):
// JSON on stdout for scripts, or text styled for people (package view),
// colour only on a terminal and never with --no-color or NO_COLOR.
type output struct {
	w    io.Writer
	json bool
	*view.Printer
}

// styles are the few text styles every human form uses.
type styles = view.Styles

// newOutput styles w: colour only on a terminal, never with noColor.
func newOutput(w io.Writer, asJSON, noColor bool) *output {
	return &output{w: w, json: asJSON, Printer: view.NewPrinter(w, noColor)}
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
	o.Wide = wide
	return o
}

// textWidth is the width human output fits by default.
const textWidth = view.TextWidth

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
	human(o.w, o.St)
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
