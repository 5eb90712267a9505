// Command mcp-demo runs the main job end to end against a real systemd in a
// disposable container (see package demo beside it) and exits 0 only if every step
// did what it should. It needs root, systemd-nspawn and socat, and runs from
// this repository (it builds mcpctl and mcp-backend): `./task demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/overdeck/mcp-backend/cmd/mcp-demo/demo"
)

func main() {
	fs := flag.NewFlagSet("mcp-demo", flag.ContinueOnError)
	results := fs.String("results", "", "directory for the stress plots, kept after the run (default: a new mcp-demo-results-* under $TMPDIR)")
	noColor := fs.Bool("no-color", false, "plain output (also NO_COLOR, or when stdout is not a terminal)")
	canary := fs.Duration("canary-stress", 0, "duration of the canary's stress (default 5s)")
	overload := fs.Duration("overload", 0, "duration of the overload through a tunnel (default 3s)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mcp-demo: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	_, noColorEnv := os.LookupEnv("NO_COLOR")
	color := !*noColor && !noColorEnv && term.IsTerminal(int(os.Stdout.Fd()))

	// SIGINT/SIGTERM cancel the running step; Run then tears the container
	// down before returning.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := demo.Run(ctx, demo.Options{Out: os.Stdout, Color: color, ResultsDir: *results, CanaryStress: *canary, Overload: *overload})
	stop()
	os.Exit(res.ExitCode())
}
