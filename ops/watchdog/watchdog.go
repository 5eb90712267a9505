// Package watchdog keeps production and the tunnels alive between operator
// visits: it probes the backend's /healthz directly and each tunnel URL's
// /healthz, and restarts a tunnel unit only after DefaultThreshold
// consecutive failures of its own probe while the backend itself is fine.
// It never restarts a backend that runs (systemd's Restart= and WatchdogSec
// own that) and never probes /readyz: a busy backend is not a dead tunnel.
// Only when systemd gave up on production (a crash loop hit the start limit
// and failed the slot and its socket) does it start production again, with
// a backoff that doubles between attempts up to RecoverBackoffMax.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
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

// Production is what a round reads of production's units and how it brings
// production back (deploy.ObserveOutage and deploy.RecoverHeld, under the
// round's lock).
type Production interface {
	Outage(ctx context.Context) (*deploy.Outage, error)
	Recover(ctx context.Context, details map[string]string) (*deploy.RecoverReport, error)
}

// The recovery's backoff: the first attempt runs in the round that finds
// production failed, the next RecoverBackoff after it, and each later one
// twice as long after the previous, up to RecoverBackoffMax. A crash loop
// that comes back within RecoverQuiet of the last attempt continues the
// same series; production answering for that long ends it.
const (
	RecoverBackoff    = 30 * time.Second
	RecoverBackoffMax = 15 * time.Minute
	RecoverQuiet      = 15 * time.Minute
)

// RecoverDelay is the wait after the attempts-th attempt: RecoverBackoff
// doubled attempts-1 times, at most RecoverBackoffMax.
func RecoverDelay(attempts int) time.Duration {
	d := RecoverBackoff
	for i := 1; i < attempts && d < RecoverBackoffMax; i++ {
		d *= 2
	}
	return min(d, RecoverBackoffMax)
}

// DecideRecovery updates w's crash-loop record with one round's facts: the
// outage (nil: systemd has not given up on production) and whether the
// backend answered. It reports whether to attempt a recovery now.
func DecideRecovery(w *state.Watchdog, now time.Time, o *deploy.Outage, backendOK bool) bool {
	r := w.Recovery
	if o == nil {
		if r == nil {
			return false
		}
		if backendOK && r.Recovered.IsZero() {
			r.Recovered = now.UTC()
		}
		if !r.Recovered.IsZero() && now.Sub(r.LastAttempt) >= RecoverQuiet && now.Sub(r.LastFailure) >= RecoverQuiet {
			w.Recovery = nil
		}
		return false
	}
	if r == nil {
		r = &state.Recovery{Since: now.UTC(), FirstFailure: now.UTC()}
		w.Recovery = r
	}
	r.Recovered = time.Time{}
	if id := o.ID(); id != r.Failure {
		r.Failure, r.LastFailure = id, now.UTC()
		r.Starts += o.Starts()
	}
	return !now.Before(r.NextTry)
}

// Attempted records an attempt made at now and when the next may run; a
// successful one recovered production then.
func Attempted(r *state.Recovery, now time.Time, err error) {
	r.Attempts++
	r.LastAttempt = now.UTC()
	r.NextTry = r.LastAttempt.Add(RecoverDelay(r.Attempts))
	r.LastOutcome, r.LastError, r.Recovered = state.OutcomeOK, "", r.LastAttempt
	if err != nil {
		r.Recovered = time.Time{}
		r.LastOutcome, r.LastError = state.OutcomeFailed, err.Error()
	}
}

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
	// Outage is production failed for good, as this round found it;
	// Recovery the crash-loop record after the round, Recovered what an
	// attempt made in this round did.
	Outage    *deploy.Outage        `json:"outage,omitempty"`
	Recovery  *state.Recovery       `json:"recovery,omitempty"`
	Recovered *deploy.RecoverReport `json:"recovered,omitempty"`
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
//
// prod, when set, is read once the lock is held: a production systemd gave
// up on is started again (or rolled back to the pending cutover's snapshot)
// when its backoff allows, logged and audited by deploy.RecoverHeld.
func Run(ctx context.Context, cfg *ctlconfig.Config, sd Restarter, prod Production, probe Probe, log *slog.Logger, threshold int) (*Report, error) {
	begin := time.Now() // the timer's rounds are this far apart: the backoff counts from here
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
	if prod != nil {
		if err := recoverRound(ctx, rep, w, begin, prod, backendErr == nil, log); err != nil {
			errsOut = append(errsOut, err)
		}
	}
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

// recoverRound reads production's outage and, when DecideRecovery says so,
// attempts a recovery; it returns the attempt's failure (the round then
// exits non-zero; the next attempt waits for its backoff).
func recoverRound(ctx context.Context, rep *Report, w *state.Watchdog, now time.Time, prod Production, backendOK bool, log *slog.Logger) error {
	o, err := prod.Outage(ctx)
	if err != nil {
		log.Warn("read production's units", "err", err)
		return nil
	}
	rep.Outage = o
	act := DecideRecovery(w, now, o, backendOK)
	rep.Recovery = w.Recovery
	if o == nil {
		return nil
	}
	r := w.Recovery
	if !act {
		log.Warn("production down; next recovery attempt after the backoff", "failed", o.String(), "attempts", r.Attempts, "next", r.NextTry)
		return nil
	}
	details := map[string]string{"attempt": fmt.Sprint(r.Attempts + 1), "starts": fmt.Sprint(r.Starts),
		"since": r.Since.Format(time.RFC3339), "backoff": RecoverDelay(r.Attempts + 1).String()}
	log.Warn("production down: recovering", "failed", o.String(), "attempt", r.Attempts+1, "starts", r.Starts)
	res, err := prod.Recover(ctx, details)
	rep.Recovered = res
	Attempted(r, now, err)
	if err != nil {
		log.Error("recovery failed", "attempt", r.Attempts, "err", err, "next", r.NextTry)
		return fmt.Errorf("recover production (attempt %d, next after %s): %w", r.Attempts, r.NextTry.Format(time.RFC3339), err)
	}
	log.Info("production recovered", "attempt", r.Attempts, "version", res.Version)
	return nil
}
