package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/jobs"
	"github.com/overdeck/mcp-backend/backend/server"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/cliargs"
)

const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2 // usage or invalid configuration
	// `mcp-backend sandbox-exec` never reaches this parser: package
	// sandbox runs it from its init (sandbox.ExitUsage, sandbox.ExitSetup).
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type deps struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func newApp(d *deps) *cli.App {
	configFlag := &cli.StringFlag{Name: "config", Usage: "backend config `FILE` (JSON)", Required: true}
	logLevelFlag := &cli.StringFlag{Name: "log-level", Value: "info", Usage: "log `LEVEL`: debug, info, warn or error"}
	// The first line stays "mcp-backend version V" (what mcpctl's candidate
	// check reads); the build's provenance follows.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, buildinfo.Long(c.App.Name)) }
	app := &cli.App{
		Name:            "mcp-backend",
		Usage:           "hardened local MCP server with process-wide admission control",
		Version:         buildinfo.Version,
		Writer:          d.stdout,
		ErrWriter:       d.stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return &exitError{exitUsage, err}
		},
		Commands: []*cli.Command{
			{
				Name:  "serve",
				Usage: "serve MCP over HTTP with /healthz, /readyz and /metrics",
				Flags: []cli.Flag{configFlag, &cli.StringFlag{Name: "listen", Usage: "override the config's listen `ADDR`"}, logLevelFlag,
					&cli.StringFlag{Name: "standby", EnvVars: []string{StandbyEnv}, Usage: "a production slot's standby: serve only on this loopback `ADDR` and accept on the socket systemd passed only after SIGUSR1 (SIGUSR2 hands off: stop accepting, finish every accepted call, park until SIGUSR1 takes over again or SIGTERM stops it)"}},
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c.String("config"), c.String("listen"), true)
					if err != nil {
						return err
					}
					level, err := logLevel(c.String("log-level"))
					if err != nil {
						return err
					}
					log := slog.New(slog.NewJSONHandler(d.stderr, &slog.HandlerOptions{Level: level})).With("version", buildinfo.Version)
					srv, err := server.New(cfg, log)
					if err != nil {
						return &exitError{exitUsage, err}
					}
					ln, err := listen(cfg.Listen, activation.Files(true))
					if err != nil {
						srv.Close()
						return err
					}
					slot, err := slotFor(c.String("standby"), ln)
					if err != nil {
						_ = ln.Close()
						srv.Close()
						return err
					}
					stop := auditProcess(srv.Audit(), c.String("config"), "http")
					err = srv.ServeSlot(c.Context, ln, slot)
					stop(err)
					return err
				},
			},
			{
				Name:  "stdio",
				Usage: "serve MCP over stdin/stdout (its own admission controller)",
				Flags: []cli.Flag{configFlag, logLevelFlag},
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c.String("config"), "", false)
					if err != nil {
						return err
					}
					level, err := logLevel(c.String("log-level"))
					if err != nil {
						return err
					}
					log := slog.New(slog.NewJSONHandler(d.stderr, &slog.HandlerOptions{Level: level})).With("version", buildinfo.Version, "transport", "stdio")
					srv, err := server.New(cfg, log)
					if err != nil {
						return &exitError{exitUsage, err}
					}
					stop := auditProcess(srv.Audit(), c.String("config"), "stdio")
					err = srv.ServeStdio(c.Context, srv.StdioTransport(d.stdin, d.stdout))
					stop(err)
					return err
				},
			},
			{
				Name:   "job-exec",
				Usage:  "run one job to its end and record how it ended (the main process of a job's transient unit)",
				Hidden: true,
				// --dir is checked in Action, so a stray argument is named first.
				Flags: []cli.Flag{&cli.StringFlag{Name: "dir", Usage: "the job's state `DIR` (required)"}},
				Action: func(c *cli.Context) error {
					if c.String("dir") == "" {
						return &exitError{exitUsage, errors.New("job-exec: --dir is required: the job's state directory")}
					}
					// SIGTERM (a stop of the unit: job.cancel, the runtime
					// limit, the host shutting down) ends the group; the
					// record says cancelled when job.cancel asked.
					self, err := os.Executable()
					if err != nil {
						return fmt.Errorf("job-exec: own executable: %w", err)
					}
					e, err := jobs.Exec(c.Context, c.String("dir"), self)
					if err != nil {
						return fmt.Errorf("job-exec: %w", err)
					}
					fmt.Fprintf(d.stderr, "job-exec: %s\n", e.State)
					return nil
				},
			},
			{
				Name:      "job-shell",
				Usage:     "cover --hide DIR and exec the job's shell (started by job-exec in a mount namespace of its own)",
				ArgsUsage: "-- PROGRAM ARGS...",
				Hidden:    true,
				Flags:     []cli.Flag{&cli.StringFlag{Name: "hide", Usage: "the `DIR` to cover (required)"}},
				Action: func(c *cli.Context) error {
					args := c.Args().Slice()
					if len(args) > 0 && !filepath.IsAbs(args[0]) {
						return &exitError{exitUsage, fmt.Errorf("job-shell: unexpected argument %q (want an absolute program after --)", args[0])}
					}
					if err := jobs.HideAndExec(c.String("hide"), args); err != nil {
						return &exitError{exitUsage, err}
					}
					return nil
				},
			},
			{
				Name:  "check-config",
				Usage: "validate a config file: exit 0 if valid, 2 and the bad field otherwise",
				Flags: []cli.Flag{configFlag},
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c.String("config"), "", true)
					if err != nil {
						return err
					}
					for _, w := range cfg.SandboxWarnings() {
						fmt.Fprintf(d.stderr, "mcp-backend: warning: %s\n", w)
					}
					fmt.Fprintf(d.stdout, "%s: ok\n", c.String("config"))
					return nil
				},
			},
			{
				Name:  "config",
				Usage: "with --effective: print the config with every default filled in, itself a valid config file",
				Flags: []cli.Flag{configFlag, &cli.BoolFlag{Name: "effective", Usage: "the config as serve runs it (defaults filled in)"}},
				Action: func(c *cli.Context) error {
					if !c.Bool("effective") {
						return &exitError{exitUsage, errors.New("config: --effective is required (the only form so far)")}
					}
					cfg, err := loadConfig(c.String("config"), "", false)
					if err != nil {
						return err
					}
					enc := json.NewEncoder(d.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(cfg)
				},
			},
		},
	}
	app.Commands = append(app.Commands, policyCommand(d, configFlag))
	app.Commands = append(app.Commands, &cli.Command{
		Name:   "man",
		Usage:  "print the man page (roff), generated from the commands",
		Hidden: true,
		Action: func(c *cli.Context) error {
			s, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			fmt.Fprint(d.stdout, s)
			return nil
		},
	})
	cliargs.Strict(app, func(err error) error { return &exitError{exitUsage, err} })
	return app
}

// logLevel parses --log-level; a bad value is a usage error.
func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, &exitError{exitUsage, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)}
	}
	return l, nil
}

// listen returns the socket systemd passed (socket activation: the socket
// unit owns the port, so it stays open while the service restarts) or,
// without one, binds listen itself (development, tests). A passed socket
// must be the address the config names: serving one port while the config
// and the probes name another would hide a misdeployed unit.
func listen(listen string, passed []*os.File) (net.Listener, error) {
	if len(passed) == 0 {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	defer func() {
		for _, f := range passed {
			f.Close()
		}
	}()
	if len(passed) != 1 {
		return nil, &exitError{exitUsage, fmt.Errorf("systemd passed %d sockets, want exactly one (the socket unit's ListenStream=)", len(passed))}
	}
	ln, err := net.FileListener(passed[0])
	if err != nil {
		return nil, &exitError{exitUsage, fmt.Errorf("the socket systemd passed is not a listening socket: %w", err)}
	}
	got, ok := ln.Addr().(*net.TCPAddr)
	want, werr := net.ResolveTCPAddr("tcp", listen)
	if !ok || werr != nil || !got.IP.Equal(want.IP) || got.Port != want.Port {
		ln.Close()
		return nil, &exitError{exitUsage, fmt.Errorf("systemd passed a socket on %s but listen (--listen or the config) is %q: make the socket unit's ListenStream= and listen name the same address", ln.Addr(), listen)}
	}
	return ln, nil
}

// StandbyEnv is the environment variable that sets serve's --standby: the
// slot unit reads it from a file mcpctl writes before a standby start.
const StandbyEnv = "MCP_BACKEND_STANDBY"

// slotFor sets up serve as a production slot: SIGUSR1 takes over the
// shared socket (from standby, or again once parked) and SIGUSR2 hands it
// off. Signals are the control channel because only root or the
// service's own user may send them (systemd's KillUnit over D-Bus is
// privileged): no token, no port. standby must be a loopback address: it serves production's tools
// before the cutover is verified, and only mcpctl on this host needs it.
func slotFor(standby string, ln net.Listener) (server.Slot, error) {
	_ = os.Unsetenv(StandbyEnv) // not inherited by the tools' commands
	var slot server.Slot
	if standby != "" {
		host, _, err := net.SplitHostPort(standby)
		ip := net.ParseIP(host)
		if err != nil || ip == nil || !ip.IsLoopback() {
			return slot, &exitError{exitUsage, fmt.Errorf("--standby %q: must be a loopback host:port (e.g. 127.0.0.1:3299)", standby)}
		}
		if ln.Addr().String() == standby {
			return slot, &exitError{exitUsage, fmt.Errorf("--standby %q: must differ from listen", standby)}
		}
		sl, err := net.Listen("tcp", standby)
		if err != nil {
			return slot, fmt.Errorf("standby listen: %w", err)
		}
		slot.Standby = sl
	}
	takeover := make(chan os.Signal, 1)
	handoff := make(chan os.Signal, 1)
	signal.Notify(takeover, syscall.SIGUSR1)
	signal.Notify(handoff, syscall.SIGUSR2)
	slot.Takeover, slot.Handoff = each(takeover), each(handoff)
	return slot, nil
}

// each turns a signal channel into one that receives a value per signal
// (signals that arrive while one is pending are one).
func each(c <-chan os.Signal) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		for range c {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

// loadConfig reads and validates the config before any socket opens; every
// failure is a usage error (exit 2).
//
// Serve and check-config both end in server.Preflight, so check-config
// passes exactly the configs serve starts with.
func loadConfig(path, listen string, preflight bool) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, &exitError{exitUsage, err}
	}
	if listen != "" {
		cfg.Listen = listen
		if err := cfg.Validate(); err != nil {
			return cfg, &exitError{exitUsage, fmt.Errorf("--listen: %w", err)}
		}
	}
	if !preflight {
		return cfg, nil
	}
	if err := server.Preflight(cfg); err != nil {
		return cfg, &exitError{exitUsage, err}
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(&deps{stdin: stdin, stdout: stdout, stderr: stderr})
	// Flags before or after arguments (urfave/cli stops at the first).
	err := app.RunContext(ctx, cliargs.Reorder(app, args))
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "mcp-backend: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	return exitFailed
}
