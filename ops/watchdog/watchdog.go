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
	"github.com/overdeck/mcp-backend/systemd"
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

// Skip reasons of a round.
const (
	SkipWanted       = "another mcpctl command waits for the lock or holds it"
	SkipRanMeanwhile = "another mcpctl command took the lock during the probes"
)

// Run does one watchdog round (what mcp-watchdog.timer runs). It probes
// without the mcpctl lock, so a slow probe never holds up a deploy, and
// takes the lock only to act on the results, never waiting for it. It
// steps aside whenever a mutating command (cutover, rollback, ...) waits
// for the lock or holds it: such a command restarts things on purpose, and
// probes taken while one ran say nothing about the tunnels.
func Run(ctx context.Context, cfg *ctlconfig.Config, sd Restarter, probe Probe, log *slog.Logger, threshold int) (*Report, error) {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	rep := &Report{Tunnels: map[string]string{}}
	dir := state.Dir(cfg.StateDir)
	if dir.Wanted() || dir.ReadHolder() != nil {
		rep.Skipped = SkipWanted
		return rep, nil
	}
	seq := dir.LockSeq()
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
	// Our state file stays single-writer under the lock; a command that
	// wants it meanwhile goes first.
	if dir.Wanted() {
		rep.Skipped = SkipWanted
		return rep, nil
	}
	lock, err := dir.TryLock("watchdog")
	if errors.Is(err, state.ErrLocked) {
		rep.Skipped = SkipWanted
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("watchdog: %w", err)
	}
	defer lock.Release()
	// Re-checked under the lock: anyone who held it since seq was read ran
	// during the probes; a command that began waiting just now goes first.
	if lock.Seq() != seq+1 {
		rep.Skipped = SkipRanMeanwhile
		return rep, nil
	}
	if dir.Wanted() {
		rep.Skipped = SkipWanted
		return rep, nil
	}
	w, err := dir.LoadWatchdog()
	if err != nil {
		log.Warn("watchdog state unreadable, starting over", "err", err)
		w = &state.Watchdog{}
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
		_ = dir.Audit(state.Event{Action: state.ActionWatchdog, Outcome: outcome, Reason: w.Tunnel(name).LastError,
			Details: map[string]string{"tunnel": name, "unit": units[name]}})
	}
	if err := dir.SaveWatchdog(w); err != nil {
		errsOut = append(errsOut, err)
	}
	return rep, errors.Join(errsOut...)
}
