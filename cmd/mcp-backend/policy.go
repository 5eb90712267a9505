package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/tooldesc"
	"github.com/overdeck/mcp-backend/backend/tools"
	"github.com/overdeck/mcp-backend/systemd"
)

// unitResolveTimeout bounds asking systemd what a unit name resolves to.
const unitResolveTimeout = 10 * time.Second

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
			// The backend's one reading of the arguments: what it would
			// refuse before the policy, check-policy refuses too, and the
			// policy reads the canonical form, as in the backend.
			args, te := tools.New(tools.Options{}).Args(c.String("tool"), args)
			if te != nil {
				return &exitError{exitUsage, fmt.Errorf("check-policy: --args: the backend refuses these before its policy: %s: %s", te.Code, te.Message)}
			}
			cfg, err := loadConfig(c.String("config"), "", false)
			if err != nil {
				return err
			}
			p, err := policy.New(cfg.Policy)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			call := policy.Call{PrincipalKind: kind, PrincipalID: id, Scopes: strings.Fields(c.String("scopes")), Tool: c.String("tool"), Args: args}
			// A unit as systemd resolves it, as the server does.
			resolve := func(ctx context.Context, unit string) (string, []string, error) {
				ctx, cancel := context.WithTimeout(ctx, unitResolveTimeout)
				defer cancel()
				return systemd.ResolveUnit(ctx, systemd.Options{}, unit)
			}
			if err := p.ResolveUnits(c.Context, &call, resolve); err != nil {
				fmt.Fprintf(d.stderr, "check-policy: systemd did not resolve the unit (%v): the unit files' names decide\n", err)
			}
			dec := p.Decide(call)
			// The sandbox its command runs in: allowed, or once approved.
			td, _ := tooldesc.Lookup(call.Tool)
			runs := td.Sandboxed && dec.Action != policy.Deny
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
