package cliargs

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Path is the command args name ("cutover", "rollback status"),
// skipping flags and their values; "" for the app itself.
func Path(app *cli.App, args []string) string {
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
			if f := Flag(flags, name); f != nil {
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

// CommandAt is the command at path ("snapshot prune"), nil if none.
func CommandAt(app *cli.App, path string) *cli.Command {
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

// Placeholder is the `NAME` a flag's usage quotes for its value, as the
// help shows it.
func Placeholder(usage string) string {
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
