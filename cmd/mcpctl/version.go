package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/cliargs"
)

// versionCommand is `mcpctl version`: the same text as --version, or the
// build info as JSON.
func versionCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, module, VCS revision and time, and Go version of this build",
		Action: func(c *cli.Context) error {
			d.out.printText(buildinfo.Read(), func(w io.Writer) {
				fmt.Fprint(w, buildinfo.Long("mcpctl"))
			})
			return nil
		},
	}
}

// completionCommand is `mcpctl completion bash|zsh`: a completion script
// generated from the app itself.
func completionCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(mcpctl completion bash), or zsh",
		ArgsUsage: "bash|zsh",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("completion: want one shell, bash or zsh")
			}
			s, err := cliargs.Completion(c.App, c.Args().First())
			if err != nil {
				return usageError("%v", err)
			}
			fmt.Fprint(d.stdout, s)
			return nil
		},
	}
}

// manCommand prints the man page (roff) generated from the app; `./task man`
// writes it.
func manCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:   "man",
		Usage:  "print the man page of mcpctl (roff), generated from its commands",
		Hidden: true,
		Action: func(c *cli.Context) error {
			s, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			fmt.Fprint(d.stdout, s)
			return nil
		},
	}
}

// configCommand is `mcpctl config`: the effective mcpctl.json, defaults
// filled in, and where it came from.
func configCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "print the effective mcpctl.json (defaults filled in); itself a valid mcpctl.json",
		Action: func(c *cli.Context) error {
			cfg, _, err := loadCtlConfig(c)
			if err != nil {
				return err
			}
			return writeJSON(d.stdout, cfg)
		},
	}
}
