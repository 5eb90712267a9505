package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/fleet/agent"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// fleetAgentCommand is the host's side of `mcpctl fleet` (ops/fleet/agent):
// each subcommand's arguments are parsed by the agent's own flag set, the
// one the restricted key's gate checks with, so what the gate lets through
// is read here exactly as it was checked.
func fleetAgentCommand(d *deps) *cli.Command {
	sub := func(name, usage string, hidden bool, run func(c *cli.Context, cmd agent.Command) error) *cli.Command {
		return &cli.Command{
			Name:            name,
			Usage:           usage,
			UsageText:       "mcpctl fleet-agent " + name + " FLAGS\n\n" + agent.Usage(name),
			ArgsUsage:       "FLAGS",
			Hidden:          hidden,
			SkipFlagParsing: true,
			Action: func(c *cli.Context) error {
				cmd, err := agent.Parse(append([]string{name}, c.Args().Slice()...))
				if errors.Is(err, flag.ErrHelp) {
					fmt.Fprintf(d.stdout, "%s\n\nUSAGE:\n   %s\n", usage, c.Command.UsageText)
					return nil
				}
				if err != nil {
					return agentError(err)
				}
				return agentError(run(c, cmd))
			},
		}
	}
	return &cli.Command{
		Name:   "fleet-agent",
		Usage:  "the host's side of mcpctl fleet (run over SSH by the controller)",
		Hidden: true,
		Subcommands: []*cli.Command{
			sub("facts", "print this host's facts as JSON; changes nothing", false, func(c *cli.Context, cmd agent.Command) error {
				f, err := agent.ReadFacts(c.Context, cmd.(*agent.Facts))
				if err != nil {
					return err
				}
				return writeJSON(d.stdout, f)
			}),
			sub("upload", "keep stdin as <fleet-dir>/blobs/sha256-HEX once its sha256 is HEX; print the path", false, func(_ *cli.Context, cmd agent.Command) error {
				p, err := agent.Receive(cmd.(*agent.Upload), os.Stdin)
				if err != nil {
					return err
				}
				fmt.Fprintln(d.stdout, p)
				return nil
			}),
			sub("start", "start mcpctl ARGS (after --) detached as the transient unit of step ID (nothing when it exists)", false, func(c *cli.Context, cmd agent.Command) error {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("locate mcpctl: %w", err)
				}
				return agent.StartStep(c.Context, cmd.(*agent.Start), self)
			}),
			sub("exec", "run mcpctl ARGS (after --) and record the outcome of step ID (what the step's unit runs)", true, func(c *cli.Context, cmd agent.Command) error {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("locate mcpctl: %w", err)
				}
				return agent.RunStep(c.Context, cmd.(*agent.Exec), self)
			}),
			sub("wait", "print step ID's outcome as JSON once it has one, or state running after --timeout", false, func(c *cli.Context, cmd agent.Command) error {
				res, err := agent.WaitStep(c.Context, cmd.(*agent.Wait))
				if err != nil {
					return err
				}
				return writeJSON(d.stdout, res)
			}),
			sub("gate", "the forced command of a restricted key: run SSH_ORIGINAL_COMMAND only if it is a fleet-agent command of this fleet", false, func(_ *cli.Context, cmd agent.Command) error {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("locate mcpctl: %w", err)
				}
				argv, err := cmd.(*agent.Gate).Check(self, d.getenv("SSH_ORIGINAL_COMMAND"))
				if err != nil {
					return withCode(126, err)
				}
				return syscall.Exec(argv[0], argv, os.Environ())
			}),
		},
	}
}

// agentError maps the agent's usage errors to exit 2 (an error that has
// its code already keeps it: the gate's 126).
func agentError(err error) error {
	var coded *outcome.Error
	var usage *agent.UsageError
	if errors.As(err, &usage) && !errors.As(err, &coded) {
		return withCode(outcome.Usage, err)
	}
	return err
}
