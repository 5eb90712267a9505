package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/ops/status"
	"github.com/overdeck/mcp-backend/ops/watchdog"
)

func watchdogCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "watchdog",
		Usage: "one round of probes: restart a tunnel after consecutive failures, start production again after a crash loop (run by mcp-watchdog.timer)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "threshold", Value: watchdog.DefaultThreshold, Usage: "consecutive failures `N` before a tunnel restart"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("threshold") < 1 {
				return usageError("--threshold %d: must be at least 1", c.Int("threshold"))
			}
			env, closeEnv, err := deployEnv(c, d, false)
			if err != nil {
				return err
			}
			defer closeEnv()
			v := env.Verify
			healthz := func(ctx context.Context, url string) error { return v.OK(ctx, url, "/healthz") }
			rep, err := watchdog.Run(c.Context, env.Config, env.Systemd, production{env}, healthz, d.logger, c.Int("threshold"))
			if rep != nil {
				rep.OK = err == nil
			}
			d.out.printText(rep, func(w io.Writer) {
				if rep.Skipped != "" {
					fmt.Fprintf(w, "watchdog skipped: %s\n", rep.Skipped)
					return
				}
				var parts []string
				for name, s := range rep.Tunnels {
					parts = append(parts, name+"="+s)
				}
				fmt.Fprintf(w, "backend ok=%v; tunnels: %s; restarted: %v\n", rep.BackendOK, strings.Join(parts, ", "), rep.Restarted)
				if cl := status.PlanCrashLoop(rep.Outage, rep.Recovery, time.Now()); cl != nil && cl.Down {
					fmt.Fprintln(w, cl.Line(func(s ...string) string { return strings.Join(s, "") }))
				}
				if r := rep.Recovered; r != nil && r.OK {
					fmt.Fprintf(w, "recovered: %s serves again (%s)\n", r.Version, r.Reason)
				}
			})
			return err
		},
	}
}

// production is what the watchdog reads and does about production: the
// deploy package's outage and recovery, under the round's lock.
type production struct{ env *deploy.Env }

func (p production) Outage(ctx context.Context) (*deploy.Outage, error) {
	return deploy.ObserveOutage(ctx, p.env.Systemd, p.env.Config.Backend.Unit)
}

func (p production) Recover(ctx context.Context, details map[string]string) (*deploy.RecoverReport, error) {
	return deploy.RecoverHeld(ctx, p.env, deploy.RecoverOptions{By: "watchdog", Details: details})
}
