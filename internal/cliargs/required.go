package cliargs

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// MissingFlagsError is a command run without the flags it requires. Its
// message is urfave/cli's own; a program that words it otherwise reads
// Path and Flags instead of parsing the message.
type MissingFlagsError struct {
	Path    string // the command's path ("fleet rollout")
	Command *cli.Command
	Flags   []string // the missing flags' first names, in the command's order
}

func (e *MissingFlagsError) Error() string {
	if len(e.Flags) == 1 {
		return fmt.Sprintf("Required flag %q not set", e.Flags[0])
	}
	return fmt.Sprintf("Required flags %q not set", strings.Join(e.Flags, ", "))
}

// Describe says which flags are missing the way a program's own usage
// errors do ("install: --build PATH is required"): each flag with the
// placeholder its usage quotes, a switch with its usage, as the help of
// cmd, the command at path, shows them.
func (e *MissingFlagsError) Describe(path string, cmd *cli.Command) string {
	var parts []string
	for _, name := range e.Flags {
		part := "--" + name
		if f, ok := Flag(cmd.Flags, name).(cli.DocGenerationFlag); ok {
			if placeholder := Placeholder(f.GetUsage()); placeholder != "" {
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

// requireFlags takes the check of required flags over from urfave/cli,
// whose error has no type a program can recognise: the flags stop being
// required to it, and each command's action runs the same check first
// (after its flags parsed, before anything else), shows the help as
// urfave/cli did and returns a *MissingFlagsError through usage. It runs
// where urfave/cli's check ran: after the flags are parsed, before the
// command's Before, a subcommand or the action. Every
// command's required flags are read before any is cleared: commands may
// share a flag.
func requireFlags(cmds []*cli.Command, usage func(error) error) {
	type need struct {
		path  string
		cmd   *cli.Command
		flags []cli.Flag
	}
	var needs []need
	Walk(cmds, func(path string, c *cli.Command) {
		var flags []cli.Flag
		for _, f := range c.Flags {
			if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
				flags = append(flags, f)
			}
		}
		if len(flags) > 0 {
			needs = append(needs, need{path, c, flags})
		}
	})
	for _, n := range needs {
		for _, f := range n.flags {
			switch rf := f.(type) {
			case *cli.StringFlag:
				rf.Required = false
			case *cli.BoolFlag:
				rf.Required = false
			default:
				panic(fmt.Sprintf("cliargs: %s: required flag %s of type %T: clear it here", n.path, f.Names()[0], f))
			}
		}
		required, before := n.flags, n.cmd.Before
		n.cmd.Before = func(c *cli.Context) error {
			var missing []string
			for _, f := range required {
				set := false
				for _, name := range f.Names() {
					set = set || c.IsSet(strings.TrimSpace(name))
				}
				if !set {
					missing = append(missing, f.Names()[0])
				}
			}
			if len(missing) > 0 {
				showHelpForMissing(c)
				return usage(&MissingFlagsError{Flags: missing})
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
}

// showHelpForMissing writes what urfave/cli's help action writes for a
// command whose required flags are missing.
func showHelpForMissing(c *cli.Context) {
	if c.Args().Present() {
		_ = cli.ShowCommandHelp(c, c.Args().First())
		return
	}
	cmd := c.Command
	if (len(cmd.Subcommands) == 1 && !cmd.HideHelp && !cmd.HideHelpCommand) || (len(cmd.Subcommands) == 0 && cmd.HideHelp) {
		templ := cmd.CustomHelpTemplate
		if templ == "" {
			templ = cli.CommandHelpTemplate
		}
		cli.HelpPrinter(c.App.Writer, templ, cmd)
		return
	}
	_ = cli.ShowSubcommandHelp(c)
}
