package main

import (
	"errors"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// failureMessage is err's message; a command run without its required
// flags says which the way mcpctl's own usage errors do ("install: --build
// PATH is required") instead of urfave/cli's wording.
func failureMessage(app *cli.App, path string, err error) string {
	var missing *cliargs.MissingFlagsError
	cmd := cliargs.CommandAt(app, path)
	if !errors.As(err, &missing) || cmd == nil {
		return err.Error()
	}
	return missing.Describe(path, cmd)
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
