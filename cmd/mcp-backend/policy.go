package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// policyCommand is "check-policy": what a call would get from the
// config's policy and why, for writing rules. It lives with the config's
// owner, beside check-config (mcpctl links nothing of backend/).
func policyCommand(d *deps, configFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "check-policy",
		Usage: "print what a call would get from the config's policy (allow, ask, deny) and which rule decides",
		Flags: []cli.Flag{configFlag,
			&cli.StringFlag{Name: "principal", Value: "anonymous", Usage: "who calls: `KIND[:ID]` (operator, oauth:ISSUER SUBJECT, asserted:ID, anonymous)"},
			&cli.StringFlag{Name: "scopes", Usage: "an OAuth token's `SCOPES`, space-separated"},
			&cli.StringFlag{Name: "tool", Usage: "the `TOOL`, e.g. shell.exec (required)"},
			&cli.StringFlag{Name: "args", Value: "{}", Usage: "the call's arguments as a JSON `OBJECT`"},
			&cli.BoolFlag{Name: "json", Usage: "print the decision as JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return &exitError{exitUsage, fmt.Errorf("check-policy: unexpected argument %q", c.Args().First())}
			}
			if c.String("tool") == "" {
				return &exitError{exitUsage, errors.New("check-policy: --tool TOOL is required")}
			}
			kind, id, _ := strings.Cut(c.String("principal"), ":")
			switch caller.Kind(kind) {
			case caller.Operator, caller.OAuth, caller.Asserted, caller.Anonymous:
			default:
				return &exitError{exitUsage, fmt.Errorf("check-policy: --principal %q: want operator, oauth:ISSUER SUBJECT, asserted:ID or anonymous", c.String("principal"))}
			}
			if kind == string(caller.Operator) && id == "" {
				id = "operator"
			}
			args := json.RawMessage(c.String("args"))
			var obj map[string]any
			if json.Unmarshal(args, &obj) != nil {
				return &exitError{exitUsage, fmt.Errorf("check-policy: --args %q: want a JSON object such as {\"command\":\"ls\"}", c.String("args"))}
			}
			cfg, err := loadConfig(c.String("config"), "", false)
			if err != nil {
				return err
			}
			p, err := policy.New(cfg.Policy)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			tool := c.String("tool")
			dec := p.Decide(policy.Call{PrincipalKind: kind, PrincipalID: id, Scopes: strings.Fields(c.String("scopes")), Tool: tool, Args: args})
			// The sandbox its command runs in: allowed, or once approved.
			runs := (tool == mcpwire.ToolShellExec || tool == mcpwire.ToolJobStart) && dec.Action != policy.Deny
			if runs {
				dec.Sandbox = cfg.Sandbox.For(dec.Sandbox, dec.Action == policy.Ask)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(d.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(dec)
			}
			line := dec.Describe()
			switch {
			case runs && dec.Action == policy.Ask:
				line += " [sandbox once approved: " + dec.Sandbox + "]"
			case runs:
				line += " [sandbox: " + dec.Sandbox + "]"
			}
			fmt.Fprintln(d.stdout, line)
			return nil
		},
	}
}
