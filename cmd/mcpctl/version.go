package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
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
