package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/textwrap"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/outcome"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/stress"
)

// runSteadyCommand is mcpctl stress --profile steady: a load well under
// capacity through the tunnels (or other given URLs), reporting transport
// failures, HTTP errors, JSON-RPC errors and tool errors separately. Exit 1
// when any call failed other than with a tool error.
func runSteadyCommand(c *cli.Context, d *deps, cfg *ctlconfig.Config) error {
	var tunnels []string
	for _, t := range cfg.Tunnels {
		tunnels = append(tunnels, t.URL)
	}
	targets, err := stress.SteadyTargets(c.StringSlice("target"), tunnels)
	if err != nil {
		return withCode(outcome.Usage, err)
	}
	run := stress.SteadyConfig{Targets: targets, Rate: c.Float64("rate"), Duration: c.Duration("duration"),
		Timeout: c.Duration("timeout"), KeepAlive: c.Bool("keepalive")}
	if err := stress.CheckSteady(run); err != nil {
		return usageError("%v", err)
	}
	// Through the tunnels the calls reach production: its token, if any.
	if who, err := verify.ForBackend(cfg.Backend.Config); err == nil {
		run.Token = who.Token
	}
	var prog *stressProgress
	if !d.out.json {
		total := run.Duration
		if total == 0 {
			total = stress.DefaultSteadyDuration
		}
		prog = newStressProgress(d.stderr, isTerminal(d.stderr), total)
		run.OnCall = func(call stress.SteadyCall) { prog.addOutcome(string(call.Outcome)) }
		prog.start()
		defer prog.finish()
	}
	rep, err := stress.RunSteady(c.Context, run)
	if prog != nil {
		prog.finish() // the report follows on a clean line
	}
	if errors.Is(err, stress.ErrInterrupted) && rep != nil {
		if d.out.json {
			_ = writeJSON(d.stdout, rep)
		} else {
			fmt.Fprintln(d.stdout, "INTERRUPTED: the counts until Ctrl-C")
			printSteady(d.stdout, rep, d.out.Width())
		}
		return withCode(outcome.Failed, errors.New("steady interrupted: the counts above are partial; run the same `mcpctl stress --profile steady` again for a verdict"))
	}
	if err != nil {
		return withCode(outcome.Failed, fmt.Errorf("stress: %w", err))
	}
	if d.out.json {
		if err := writeJSON(d.stdout, rep); err != nil {
			return withCode(outcome.Failed, err)
		}
	} else {
		printSteady(d.stdout, rep, d.out.Width())
	}
	if !rep.Total.Clean() {
		return withCode(outcome.Failed, fmt.Errorf("steady: %d transport failures, %d HTTP errors, %d JSON-RPC errors, %d unreadable replies in %d calls",
			rep.Total.Transport, rep.Total.HTTP, rep.Total.JSONRPC, rep.Total.BadReply, rep.Total.Calls))
	}
	return nil
}

// printSteady renders the counts: one row per target and the total, then
// the error codes and the first failures. width 0 is --wide: the long
// headers and full URLs; otherwise short headers and URLs without their
// http:// scheme, to fit 80 columns (107 before).
func printSteady(w io.Writer, rep *stress.SteadyReport, width int) {
	conn := "one connection per call"
	if rep.KeepAlive {
		conn = "keep-alive connections"
	}
	fmt.Fprintf(w, "%s\n\n", textwrap.Wrap(fmt.Sprintf("steady load: %g calls/s for %s through %d target(s), half shell.exec %q, half system.info (%s)",
		rep.Rate, rep.Duration, len(rep.Targets), stress.SteadyShellCommand, conn), width, "  "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header, target := "target\tcalls\tok\ttransport\tHTTP\tJSON-RPC\ttool errors\tbad replies\twait p50 ms\tp99 ms\tmax ms\t", func(s string) string { return s }
	if width > 0 {
		fmt.Fprintln(w, "(RPC: JSON-RPC errors; tool: tool errors; bad: unreadable replies; wait in ms)")
		header = "target\tcalls\tok\ttransport\tHTTP\tRPC\ttool\tbad\tp50\tp99\tmax\t"
		target = func(s string) string { return strings.TrimPrefix(s, "http://") }
	}
	fmt.Fprintln(tw, header)
	row := func(c stress.SteadyCounts) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t\n", target(c.Target), c.Calls, c.OK, c.Transport, c.HTTP, c.JSONRPC, c.Tool, c.BadReply,
			c.Wait.P50Ms, c.Wait.P99Ms, c.Wait.MaxMs)
	}
	for _, c := range rep.Targets {
		row(c)
	}
	row(rep.Total)
	tw.Flush()
	codes := func(what string, m map[string]int) {
		if len(m) == 0 {
			return
		}
		var parts []string
		for _, k := range stress.Codes(m) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		fmt.Fprintf(w, "%s: %s\n", what, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	codes("HTTP errors by status", rep.Total.HTTPByStatus)
	codes("JSON-RPC errors by code", rep.Total.JSONRPCByCode)
	codes("tool errors by code", rep.Total.ToolByCode)
	for _, c := range rep.Targets {
		for _, s := range c.Samples {
			fmt.Fprintln(w, textwrap.Wrap(fmt.Sprintf("  %s: %s", c.Target, s), width, "    "))
		}
	}
	verdict := "CLEAN: no transport failure, HTTP error or JSON-RPC error"
	if !rep.Total.Clean() {
		verdict = "NOT CLEAN: callers saw failures other than tool results"
	}
	fmt.Fprintln(w, textwrap.Wrap(fmt.Sprintf("%s; longest wait %.0f ms (p99 %.0f ms)", verdict, rep.Total.Wait.MaxMs, rep.Total.Wait.P99Ms), width, "  "))
}
