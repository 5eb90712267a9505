package main

import "github.com/urfave/cli/v2"

// commands lists every subcommand; each lives in its own file.
func commands(d *deps) []*cli.Command {
	return []*cli.Command{
		unitCommand(d),
		stressCommand(d),
		cutoverCommand(d),
		rollbackCommand(d),
		recoverCommand(d),
		verifyCommand(d),
		watchdogCommand(d),
		installCommand(d),
		canaryCommand(d),
		snapshotCommand(d),
		statusCommand(d),
		auditCommand(d),
		approvalsCommand(d),
		policyCommand(d),
		versionCommand(d),
		configCommand(d),
		completionCommand(d),
		manCommand(d),
		fleetCommand(d), fleetAgentCommand(d),
	}
}
