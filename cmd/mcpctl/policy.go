package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/units"
)

// policyCommand is "policy check": what a call would get from the
// production backend's policy. mcpctl links nothing of backend/, so it
// asks the installed backend (mcp-backend check-policy) with the
// production config, and passes its output and exit code through.
func policyCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "what the backend's policy decides for a call",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "print what a call would get (allow, ask, deny) and which rule decides, from the production config",
			Description: "Runs the installed backend's check-policy (install.root's current release, or\n" +
				"--backend-binary) with backend.config, for writing rules.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "principal", Value: "anonymous", Usage: "who calls: `KIND[:ID]` (operator, oauth:ISSUER SUBJECT, asserted:ID, anonymous)"},
				&cli.StringFlag{Name: "scopes", Usage: "an OAuth token's `SCOPES`, space-separated"},
				&cli.StringFlag{Name: "tool", Usage: "the `TOOL`, e.g. shell.exec (required)"},
				&cli.StringFlag{Name: "args", Value: "{}", Usage: "the call's arguments as a JSON `OBJECT`"},
				&cli.StringFlag{Name: "backend-binary", Usage: "the mcp-backend `PATH` to ask (default: install.root's current release)"},
			},
			Action: func(c *cli.Context) error { return policyCheck(c, d) },
		}},
	}
}

func policyCheck(c *cli.Context, d *deps) error {
	if c.String("tool") == "" {
		return usageError("policy check: --tool TOOL is required (e.g. shell.exec)")
	}
	cfg, _, err := loadCtlConfig(c)
	if err != nil {
		return err
	}
	bin := c.String("backend-binary")
	if bin == "" {
		bin = units.CurrentBinary(cfg.Install.Root)
	}
	if _, err := os.Stat(bin); err != nil {
		return withCode(outcome.Failed, fmt.Errorf("policy check: the backend binary: %w (install a release, or name one with --backend-binary)", err))
	}
	argv := []string{"check-policy", "--config", cfg.Backend.Config, "--principal", c.String("principal"),
		"--tool", c.String("tool"), "--args", c.String("args")}
	if c.IsSet("scopes") {
		argv = append(argv, "--scopes", c.String("scopes"))
	}
	if d.out.json {
		argv = append(argv, "--json")
	}
	cmd := exec.CommandContext(c.Context, bin, argv...)
	cmd.Stdout, cmd.Stderr = d.stdout, d.stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		// check-policy said why on stderr; its code is the answer.
		return &passedExit{code: ee.ExitCode()}
	}
	return withCode(outcome.Failed, fmt.Errorf("policy check: %s: %w", bin, err))
}

// passedExit is another program's exit code, passed through as mcpctl's;
// that program already printed its error.
type passedExit struct{ code int }

func (e *passedExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }
