package cliargs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// Strict makes app refuse what urfave/cli would otherwise misread or report
// with its own exit code: an unknown command or subcommand (its help action
// exits 3, which both programs reserve for other meanings), a bad flag, and
// positional arguments given to a command that takes none. Each comes back
// through usage, the app's usage error (exit 2), naming the nearest valid
// name. "help [COMMAND]" shows help and succeeds. A command run without a
// required flag fails with a *MissingFlagsError through usage. Strict
// changes app's commands and flags: give it each app once, its flags made
// for it; the app's ExitErrHandler must not exit.
func Strict(app *cli.App, usage func(error) error) {
	if app.Action == nil {
		app.Action = func(c *cli.Context) error {
			args := c.Args().Slice()
			switch {
			case len(args) == 0:
				return cli.ShowAppHelp(c)
			case args[0] == "help" && len(args) == 1:
				return cli.ShowAppHelp(c)
			case args[0] == "help":
				if Command(c.App.Commands, args[1]) == nil {
					return usage(unknown("", "command", args[1], c.App.Commands))
				}
				return cli.ShowCommandHelp(c, args[1])
			}
			return usage(unknown("", "command", args[0], c.App.Commands))
		}
	}
	strictCommands(app.Commands, "", usage)
	requireFlags(app.Commands, usage)
	quietSwitches(app.Flags)
	Walk(app.Commands, func(_ string, c *cli.Command) { quietSwitches(c.Flags) })
}

// quietSwitches drops "(default: false)" from the help of switches: it is
// the only value a switch can default to, and it made help lines show one
// default more than the flag has.
func quietSwitches(flags []cli.Flag) {
	for _, f := range flags {
		if b, ok := f.(*cli.BoolFlag); ok {
			b.DisableDefaultText = true
		}
	}
}

func strictCommands(cmds []*cli.Command, prefix string, usage func(error) error) {
	for _, cmd := range cmds {
		path := strings.TrimSpace(prefix + " " + cmd.Name)
		flags := cmd.Flags
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return usage(fmt.Errorf("%s: %w", path, suggestFlag(err, flags)))
		}
		switch {
		case cmd.Action == nil && len(cmd.Subcommands) > 0:
			subs := cmd.Subcommands
			cmd.Action = func(c *cli.Context) error {
				if !c.Args().Present() {
					return cli.ShowSubcommandHelp(c)
				}
				return usage(unknown(path, "subcommand", c.Args().First(), subs))
			}
		case cmd.Action != nil && len(cmd.Subcommands) == 0 && cmd.ArgsUsage == "":
			action := cmd.Action
			cmd.Action = func(c *cli.Context) error {
				if c.Args().Present() {
					return usage(fmt.Errorf("%s: unexpected argument %q: it takes flags only (see --help)", path, c.Args().First()))
				}
				return action(c)
			}
		}
		strictCommands(cmd.Subcommands, path, usage)
	}
}

// unknown says that name is no command of cmds and which one was meant.
func unknown(path, what, name string, cmds []*cli.Command) error {
	names := Names(cmds)
	msg := fmt.Sprintf("unknown %s %q", what, name)
	if path != "" {
		msg = path + ": " + msg
	}
	if n := Nearest(name, names); n != "" {
		msg += fmt.Sprintf(": did you mean %q?", n)
	}
	return fmt.Errorf("%s (want %s)", msg, orList(names))
}

// suggestFlag adds the nearest defined flag to the flag package's "not
// defined" error.
func suggestFlag(err error, flags []cli.Flag) error {
	const notDefined = "flag provided but not defined: -"
	s := err.Error()
	got, ok := strings.CutPrefix(s, notDefined)
	if !ok {
		return err
	}
	got = "--" + strings.TrimLeft(got, "-")
	if n := Nearest(got, FlagNames(flags)); n != "" {
		return fmt.Errorf("unknown flag %s: did you mean %s?", got, n)
	}
	return errors.New("unknown flag " + got)
}

func orList(names []string) string {
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Validate reports whether line (words separated by spaces, the program
// name first) is a command line app accepts: every word before the
// arguments names a command of the one before, every flag is defined on the
// path, a value flag has a value, and the command it ends at can run
// (has an action). Placeholders (ID, FILE, N) stand for values.
func Validate(app *cli.App, line string) error {
	return validate(app, line, strings.Fields(line), false)
}

// validate is Validate over words already split. partial accepts a line
// that stops early, as prose quotes one: at a command group, or at a
// value flag whose value it leaves out.
func validate(app *cli.App, line string, words []string, partial bool) error {
	if len(words) == 0 || words[0] != app.Name {
		return fmt.Errorf("%q: does not start with %s", line, app.Name)
	}
	flags := [][]cli.Flag{app.Flags}
	cmds := app.Commands
	var cmd *cli.Command
	args, help := 0, false
	for i := 1; i < len(words); i++ {
		w := words[i]
		if strings.HasPrefix(w, "-") {
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if name == "help" || name == "h" {
				help = true
				continue
			}
			var f cli.Flag
			for j := len(flags) - 1; j >= 0 && f == nil; j-- {
				f = Flag(flags[j], name)
			}
			if f == nil {
				return fmt.Errorf("%q: flag %s is not defined there", line, w)
			}
			if TakesValue(f) && !hasValue {
				if i+1 >= len(words) {
					if partial {
						continue
					}
					return fmt.Errorf("%q: flag %s needs a value", line, w)
				}
				i++
			}
			continue
		}
		if args == 0 {
			if c := Command(cmds, w); c != nil {
				cmd, cmds = c, c.Subcommands
				flags = append(flags, c.Flags)
				continue
			}
		}
		if cmd == nil || cmd.ArgsUsage == "" {
			return fmt.Errorf("%q: %q is no command there and the command takes no arguments", line, w)
		}
		args++
	}
	switch {
	case partial:
		return nil
	case len(words) == 1:
		return fmt.Errorf("%q: names no command", line)
	case help:
		return nil
	case cmd != nil && (cmd.Action == nil || (len(cmd.Subcommands) > 0 && len(cmd.Flags) == 0 && args == 0)):
		// A group without flags of its own only prints its help.
		return fmt.Errorf("%q: %s needs a subcommand", line, cmd.Name)
	}
	return nil
}
