package main

import (
	"errors"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/cliargs"

	"github.com/overdeck/mcp-backend/ops/outcome"
)

// commandPath is the command args name ("cutover", "rollback status"),
// skipping flags and their values; "" for the app itself.
func commandPath(app *cli.App, args []string) string {
	var path []string
	cmds, flags := app.Commands, app.Flags
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := findFlag(flags, name); f != nil {
				if _, isBool := f.(*cli.BoolFlag); !isBool {
					i++ // the flag's value
				}
			}
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			break
		}
		path = append(path, next.Name)
		cmds, flags = next.Subcommands, next.Flags
	}
	return strings.Join(path, " ")
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func findCommand(app *cli.App, path string) *cli.Command {
	var cmd *cli.Command
	cmds := app.Commands
	for _, name := range strings.Fields(path) {
		cmd = nil
		for _, c := range cmds {
			if c.Name == name {
				cmd = c
			}
		}
		if cmd == nil {
			return nil
		}
		cmds = cmd.Subcommands
	}
	return cmd
}

// failureMessage is err's message; a command run without its required
// flags says which the way mcpctl's own usage errors do ("install: --build
// PATH is required") instead of urfave/cli's wording.
func failureMessage(app *cli.App, path string, err error) string {
	var missing *cliargs.MissingFlagsError
	cmd := findCommand(app, path)
	if !errors.As(err, &missing) || cmd == nil {
		return err.Error()
	}
	var parts []string
	for _, name := range missing.Flags {
		part := "--" + name
		if f, ok := findFlag(cmd.Flags, name).(cli.DocGenerationFlag); ok {
			if placeholder := placeholderOf(f.GetUsage()); placeholder != "" {
				part += " " + placeholder
			} else if !f.TakesValue() {
				part += " (" + f.GetUsage() + ")" // a switch says why it is needed
			}
		}
		parts = append(parts, part)
	}
	verb := "is"
	if len(parts) > 1 {
		verb = "are"
	}
	return path + ": " + strings.Join(parts, " and ") + " " + verb + " required"
}

// nextCommand is what to run after a failure whose message names nothing:
// the command's help for a usage error (the config for a config error), the
// production overview otherwise.
// A failed rollback has its own HUMAN NEEDED steps.
func nextCommand(code int, path, msg string) string {
	switch {
	case code == outcome.Usage && strings.HasPrefix(msg, "config:"):
		return "`mcpctl " + strings.TrimSpace("--config FILE "+path) + "` with a readable mcpctl.json (or fix the file named above)"
	case code == outcome.Usage:
		if path == "" {
			return "`mcpctl --help`"
		}
		return "`mcpctl " + path + " --help`"
	case (code == outcome.Failed || code == outcome.RolledBack) && path != "" && path != "status":
		// The same command line, not its bare name: a bare rollback only
		// prints its help.
		return "`mcpctl status` to see production as it runs now, then fix the cause above and run the same command again"
	}
	return ""
}

// placeholderOf is the `NAME` a flag's usage quotes for its value, as the
// help shows it.
func placeholderOf(usage string) string {
	_, rest, ok := strings.Cut(usage, "`")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, "`")
	if !ok {
		return ""
	}
	return name
}
