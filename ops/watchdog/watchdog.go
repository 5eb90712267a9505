// Package watchdog keeps the tunnels alive between operator visits: it probes
// the backend's /healthz directly and each tunnel URL's /healthz, and restarts
// a tunnel unit only after DefaultThreshold consecutive failures of its own
// probe while the backend itself is fine. It never restarts the backend
// (systemd's WatchdogSec owns that) and never probes /readyz: a busy backend
// is not a dead tunnel.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/systemd"
)

// DefaultThreshold is how many consecutive failed probes of a tunnel, with a
// healthy backend, it takes to restart it: one blip restarts nothing.
const DefaultThreshold = 3

// Restarter is the part of the systemd client the watchdog uses.
type Restarter interface {
	Restart(ctx context.Context, unit string) error
}

var _ Restarter = (*systemd.Client)(nil)

// Probe checks url's /healthz.
type Probe func(ctx context.Context, baseURL string) error

// Decide updates w with one round of probe results and returns the tunnels
// to restart. tunnelErrs holds each configured tunnel's probe result by name.
// With the backend down, tunnel failures say nothing about the tunnels (they
// forward to it), so they are neither counted nor forgiven.
func Decide(w *state.Watchdog, now time.Time, threshold int, backendErr error, tunnelErrs map[string]error) []string {
	var restart []string
	for name, err := range tunnelErrs {
		th := w.Tunnel(name)
		switch {
		case err == nil:
			th.OK(now)
		case backendErr != nil:
		default:
			if th.Fail(now, err.Error()) >= threshold {
				restart = append(restart, name)
			}
		}
	}
	return restart
}

// Report is one run's outcome.
type Report struct {
	// OK is the verdict of the round: it ran without error (exit 0).
	OK        bool              `json:"ok"`
	Skipped   string            `json:"skipped,omitempty"`
	BackendOK bool              `json:"backendOK"`
	Tunnels   map[string]string `json:"tunnels"` // name -> "ok" or the error
	Restarted []string          `json:"restarted,omitempty"`
}

// Run does one watchdog round (what mcp-watchdog.timer runs).
func Run(ctx context.Context, cfg *ctlconfig.Config, sd Restarter, probe Probe, log *slog.Logger, threshold int) (*Report, error) {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	rep := &Report{Tunnels: map[string]string{}}
	// A mutating command (cutover, rollback) restarts things on purpose:
	// stay out of its way, and keep our state file single-writer.
	release, err := state.Dir(cfg.StateDir).Lock("watchdog")
	if errors.Is(err, state.ErrLocked) {
		rep.Skipped = "another mcpctl command is running"
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("watchdog: %w", err)
	}
	defer release()
	w, err := state.Dir(cfg.StateDir).LoadWatchdog()
	if err != nil {
		log.Warn("watchdog state unreadable, starting over", "err", err)
		w = &state.Watchdog{}
	}
	backendErr := probe(ctx, "http://"+cfg.Backend.Listen)
	rep.BackendOK = backendErr == nil
	errs := map[string]error{}
	units := map[string]string{}
	for _, t := range cfg.Tunnels {
		errs[t.Name] = probe(ctx, t.URL)
		units[t.Name] = t.Unit
		rep.Tunnels[t.Name] = "ok"
		if errs[t.Name] != nil {
			rep.Tunnels[t.Name] = errs[t.Name].Error()
		}
	}
	now := time.Now()
	var errsOut []error
	for _, name := range Decide(w, now, threshold, backendErr, errs) {
		log.Warn("restarting tunnel", "tunnel", name, "unit", units[name], "failures", w.Tunnel(name).ConsecutiveFailures)
		err := sd.Restart(ctx, units[name])
		w.Tunnel(name).Restarted(now)
		outcome := state.OutcomeOK
		if err != nil {
			outcome = state.OutcomeFailed
			errsOut = append(errsOut, err) // names the job and the unit
		} else {
			rep.Restarted = append(rep.Restarted, name)
		}
		_ = state.Dir(cfg.StateDir).Audit(state.Event{Action: state.ActionWatchdog, Outcome: outcome, Reason: w.Tunnel(name).LastError,
			Details: map[string]string{"tunnel": name, "unit": units[name]}})
	}
	if err := state.Dir(cfg.StateDir).SaveWatchdog(w); err != nil {
		errsOut = append(errsOut, err)
	}
	return rep, errors.Join(errsOut...)
}
