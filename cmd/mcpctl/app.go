package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/cliargs"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/lockfile"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// withCode marks err with an exit code (deploy's table: scripts branch on
// the codes).
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &outcome.Error{Code: code, Err: err}
}

// usageError is a usage or configuration error (exit 2).
func usageError(format string, args ...any) error {
	return withCode(outcome.Usage, fmt.Errorf(format, args...))
}

// deps is what commands need from the outside world; tests fill it with
// buffers and fakes where the real part cannot run.
type deps struct {
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	logger *slog.Logger
	// out is the output of the command being run, resolved before its
	// action (withOutput).
	out *output
	// stressSampler connects stress's unit sampler; nil means D-Bus.
	stressSampler stressSamplerFunc
}

func newApp(d *deps) *cli.App {
	app := &cli.App{
		Name:      "mcpctl",
		Usage:     "deploy mcp-backend safely: canary, stress, cutover with automatic rollback",
		Version:   buildinfo.Version,
		Writer:    d.stdout,
		ErrWriter: d.stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "mcpctl config `FILE`", Value: ctlconfig.DefaultPath, EnvVars: []string{"MCPCTL_CONFIG"}},
			jsonFlag(),
			// NO_COLOR is honoured by Before: any non-empty value means no
			// colour (no-color.org), which a boolean flag's parser refuses.
			&cli.BoolFlag{Name: "no-color", Usage: "plain output without colour (also NO_COLOR=anything)"},
			&cli.BoolFlag{Name: "wide", Usage: "tables and lines as wide as they need (default: fit 80 columns)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log `LEVEL` on stderr: debug, info, warn or error"},
			lockWaitFlag(),
		},
		Commands:        withOutput(d, commands(d)),
		HideHelpCommand: true,
		Before: func(c *cli.Context) error {
			if w := c.Duration("lock-wait"); w < 0 {
				return usageError("--lock-wait %s: must be 0 or more", w)
			}
			if d.getenv("NO_COLOR") != "" {
				return c.Set("no-color", "true")
			}
			return nil
		},
		// Errors are turned into exit codes by run, nowhere else.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return withCode(outcome.Usage, err)
		},
	}
	// The first line stays "mcpctl version V"; the build's provenance follows.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, buildinfo.Long(c.App.Name)) }
	cliargs.Strict(app, func(err error) error { return withCode(outcome.Usage, err) })
	return app
}

// run builds the app and maps its error to an exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	level, levelErr := logLevelOf(args)
	d := &deps{
		stdout: stdout,
		stderr: stderr,
		getenv: os.Getenv,
		// One logger for every command: progress and warnings on stderr,
		// never mixed into the report on stdout. It stays text under
		// --json: the error, the last line, is then a JSON object.
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if levelErr != nil {
		return reportError(wantsJSON(args), stderr, outcome.Usage, levelErr.Error(), "`mcpctl --help`", nil)
	}
	return runApp(ctx, newApp(d), args, stderr)
}

func runApp(ctx context.Context, app *cli.App, args []string, stderr io.Writer) int {
	// Flags before or after arguments (urfave/cli stops at the first).
	args = cliargs.Reorder(app, args)
	err := app.RunContext(ctx, args)
	if err == nil {
		return outcome.OK
	}
	var passed *passedExit
	if errors.As(err, &passed) {
		return passed.code // its program reported it already
	}
	code := outcome.Failed
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		code = ce.ExitCode() // an *outcome.Error, or urfave/cli's own
	}
	path := cliargs.Path(app, args)
	msg := failureMessage(app, path, err)
	next := nextCommand(code, path, msg)
	if strings.Contains(msg, "`mcpctl ") {
		next = "" // the message names what to run
	}
	var locked *lockfile.LockedError
	errors.As(err, &locked)
	return reportError(wantsJSON(args), stderr, code, msg, next, locked)
}

// humanNeeded is what a failed rollback (exit 4) adds to its error.
const humanNeeded = "HUMAN NEEDED: production could not be brought back to a known state. " +
	"Inspect `mcpctl status`, `mcpctl rollback status` and the production slots' journal (`journalctl -u 'mcp-backend@*'` for the default backend.unit of mcpctl.json). " +
	"After a cutover or rollback, run `mcpctl rollback --snapshot ID` by hand; after a first install, the report above lists what could not be undone."

// reportError writes the failure (text, or a JSON object under --json) and
// returns its exit code.
func reportError(asJSON bool, stderr io.Writer, code int, msg, next string, locked *lockfile.LockedError) int {
	if asJSON {
		var e outcome.Failure
		e.Error.Message, e.Error.ExitCode, e.Error.Next = msg, code, strings.Trim(next, "`")
		if i := strings.Index(next, "` "); i >= 0 {
			e.Error.Next = next[1:i] // the command line, without what follows it
		}
		if code == outcome.RollbackFailed {
			e.Error.HumanNeeded = humanNeeded
		}
		if locked != nil {
			e.Error.LockHeld = &outcome.LockHeld{Path: locked.Path, Holder: locked.Holder}
		}
		b, _ := json.Marshal(e)
		fmt.Fprintf(stderr, "%s\n", b)
		return code
	}
	fmt.Fprintf(stderr, "mcpctl: %s\n", msg)
	if next != "" {
		fmt.Fprintf(stderr, "mcpctl: next: run %s\n", next)
	}
	if code == outcome.RollbackFailed {
		fmt.Fprintln(stderr, "mcpctl: "+humanNeeded)
	}
	return code
}

// wantsJSON reports whether argv asks for --json anywhere before "--"
// (read before the app parses it: the logger and errors need it too).
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// logLevelOf is --log-level of argv (info when absent), read before the
// app parses it: the logger exists before any command runs.
func logLevelOf(args []string) (slog.Level, error) {
	var l slog.Level
	for i, a := range args {
		if a == "--" {
			break
		}
		v, ok := strings.CutPrefix(a, "--log-level=")
		if !ok && a == "--log-level" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return l, fmt.Errorf("--log-level %q: want debug, info, warn or error", v)
			}
		}
	}
	return l, nil
}
