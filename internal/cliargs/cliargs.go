// Package cliargs holds what both command-line programs do around
// urfave/cli's parser: flags accepted before or after positional arguments,
// the nearest valid command or flag for a mistyped one, and the walk over
// every command that tests, completion and man pages share.
//
// urfave/cli v2 parses each command's flags with the standard flag package,
// which stops at the first positional argument, and has no setting to do
// otherwise; Reorder moves every flag ahead of the positional arguments, to
// the command that defines it, before the app parses argv.
package cliargs

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// level is one command on the path argv names: its flags and the flag
// tokens that belong to it.
type level struct {
	name   string // "" for the app itself
	flags  []cli.Flag
	tokens []string
}

// Reorder returns args (args[0] is the program) with every flag moved next to
// the command that defines it: global flags written after a command go to
// the app, a command's flags written after its arguments go before them.
// A flag no command on the path defines stays with the innermost command,
// whose parser reports it. Everything after "--", and everything after a
// command that parses its own arguments (SkipFlagParsing), is left as it
// is.
func Reorder(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	levels := []*level{{flags: app.Flags}}
	cmds := app.Commands
	var positional, rest []string
	dash := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			dash, rest = true, args[i+1:]
			break
		}
		if len(a) > 1 && strings.HasPrefix(a, "-") {
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			at := levels[len(levels)-1]
			var f cli.Flag
			for j := len(levels) - 1; j >= 0; j-- {
				if f = Flag(levels[j].flags, name); f != nil {
					at = levels[j]
					break
				}
			}
			at.tokens = append(at.tokens, a)
			if f != nil && !hasValue && TakesValue(f) && i+1 < len(args) {
				i++
				at.tokens = append(at.tokens, args[i])
			}
			continue
		}
		if len(positional) == 0 {
			if c := Command(cmds, a); c != nil {
				levels = append(levels, &level{name: a, flags: c.Flags})
				cmds = c.Subcommands
				if c.SkipFlagParsing {
					// It parses its own arguments: they reach it as given.
					positional = args[i+1:]
					break
				}
				continue
			}
		}
		positional = append(positional, a)
	}
	out := []string{args[0]}
	for _, l := range levels {
		if l.name != "" {
			out = append(out, l.name)
		}
		out = append(out, l.tokens...)
	}
	out = append(out, positional...)
	if dash {
		out = append(append(out, "--"), rest...)
	}
	return out
}

// Flag is the flag of flags named name, nil if none.
func Flag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// TakesValue reports whether f consumes the next argument.
func TakesValue(f cli.Flag) bool {
	d, ok := f.(cli.DocGenerationFlag)
	return ok && d.TakesValue()
}

// Command is the command of cmds named name (or aliased), nil if none.
func Command(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// Nearest is the candidate closest to got by edit distance, "" when none is
// close enough to be a likely typo (at most a third of its letters off).
func Nearest(got string, candidates []string) string {
	best, bestD := "", len(got)/3+1
	for _, c := range candidates {
		if d := distance(got, c); d < bestD || (d == bestD && best == "" && strings.HasPrefix(c, got)) {
			best, bestD = c, d
		}
	}
	if best == "" {
		// A prefix ("snap" for snapshot) is a likely abbreviation.
		for _, c := range candidates {
			if got != "" && strings.HasPrefix(c, got) {
				return c
			}
		}
	}
	return best
}

// distance is the Damerau-Levenshtein distance (optimal string alignment):
// a swap of two neighbouring letters, the commonest typo, counts as one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// Names are the names of cmds, hidden ones left out.
func Names(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c.Name)
		}
	}
	return out
}

// FlagNames are the long names of flags as written on a command line.
func FlagNames(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) > 1 {
				out = append(out, "--"+n)
			}
		}
	}
	return out
}

// Walk calls fn for every command under cmds with its path ("snapshot
// prune"), parents before their subcommands.
func Walk(cmds []*cli.Command, fn func(path string, c *cli.Command)) {
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(prefix + " " + c.Name)
			fn(p, c)
			walk(p, c.Subcommands)
		}
	}
	walk("", cmds)
}
