package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/watchdog"
	"github.com/overdeck/mcp-backend/systemd"
)

func watchdogCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "watchdog",
		Usage: "one round of tunnel probes; restart a tunnel after consecutive failures (run by mcp-watchdog.timer)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "threshold", Value: watchdog.DefaultThreshold, Usage: "consecutive failures `N` before a tunnel restart"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("threshold") < 1 {
				return usageError("--threshold %d: must be at least 1", c.Int("threshold"))
			}
			cfg, _, err := loadCtlConfig(c)
			if err != nil {
				return err
			}
			log := d.logger
			sd, err := systemd.Connect(c.Context, systemd.Options{Logger: log})
			if err != nil {
				return fmt.Errorf("connect to systemd: %w", err)
			}
			defer sd.Close()
			v, _ := probeClient(cfg, false, log)
			healthz := func(ctx context.Context, url string) error { return v.OK(ctx, url, "/healthz") }
			rep, err := watchdog.Run(c.Context, cfg, sd, healthz, log, c.Int("threshold"))
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
			})
			return err
		},
	}
}
