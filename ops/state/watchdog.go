package state

import (
	"fmt"
	"time"
)

// Watchdog is the watchdog's memory between timer runs: consecutive probe
// failures per tunnel, so that one blip restarts nothing, and production's
// crash loop with the watchdog's attempts to bring it back.
type Watchdog struct {
	Updated time.Time                `json:"updated"`
	Tunnels map[string]*TunnelHealth `json:"tunnels"`
	// Recovery is the crash loop the watchdog found (nil: none since the
	// last quiet period).
	Recovery *Recovery `json:"recovery,omitempty"`
}

// Recovery is one crash loop of production: systemd gave up on it (the
// start limit failed the slot and its socket) and the watchdog starts it
// again, with a backoff that doubles between attempts.
type Recovery struct {
	// Since is when the watchdog first found production failed.
	Since time.Time `json:"since"`
	// Starts are the starts systemd made in the loop: for each failure the
	// watchdog found, the failed unit's first start and its automatic
	// restarts (NRestarts + 1).
	Starts int `json:"starts"`
	// FirstFailure and LastFailure bound the failures found; Failure names
	// the last (unit and invocation), so one failure is counted once.
	FirstFailure time.Time `json:"firstFailure"`
	LastFailure  time.Time `json:"lastFailure"`
	Failure      string    `json:"failure,omitempty"`
	// Attempts made so far, the last one's time and outcome, and when the
	// next may run.
	Attempts    int       `json:"attempts"`
	LastAttempt time.Time `json:"lastAttempt,omitzero"`
	LastOutcome string    `json:"lastOutcome,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	NextTry     time.Time `json:"nextTry,omitzero"`
	// Recovered is when a round found production answering again after an
	// attempt (zero while it is down).
	Recovered time.Time `json:"recovered,omitzero"`
}

// TunnelHealth is one tunnel's record, keyed by tunnel name.
type TunnelHealth struct {
	ConsecutiveFailures int       `json:"consecutiveFailures"`
	LastOK              time.Time `json:"lastOK,omitzero"`
	LastFailure         time.Time `json:"lastFailure,omitzero"`
	LastError           string    `json:"lastError,omitempty"`
	LastRestart         time.Time `json:"lastRestart,omitzero"`
	Restarts            int       `json:"restarts"`
}

// Tunnel returns the record for name, creating it.
func (w *Watchdog) Tunnel(name string) *TunnelHealth {
	if w.Tunnels == nil {
		w.Tunnels = map[string]*TunnelHealth{}
	}
	t := w.Tunnels[name]
	if t == nil {
		t = &TunnelHealth{}
		w.Tunnels[name] = t
	}
	return t
}

// OK records a passing probe: the failure streak ends.
func (t *TunnelHealth) OK(now time.Time) {
	t.ConsecutiveFailures = 0
	t.LastOK = now.UTC()
	t.LastError = ""
}

// Fail records a failing probe and returns the streak length.
func (t *TunnelHealth) Fail(now time.Time, reason string) int {
	t.ConsecutiveFailures++
	t.LastFailure = now.UTC()
	t.LastError = reason
	return t.ConsecutiveFailures
}

// Restarted records a restart; the streak starts over so the restarted
// tunnel gets N fresh probes before the next restart.
func (t *TunnelHealth) Restarted(now time.Time) {
	t.ConsecutiveFailures = 0
	t.LastRestart = now.UTC()
	t.Restarts++
}

// LoadWatchdog returns the saved state, or an empty one when there is none.
// A file that cannot be parsed is an error: the caller decides whether to
// start over.
func (d Dir) LoadWatchdog() (*Watchdog, error) {
	stateDir := string(d)
	w := &Watchdog{}
	if _, err := readJSON(stateDir, WatchdogFile, w); err != nil {
		return nil, fmt.Errorf("watchdog state: %w", err)
	}
	if w.Tunnels == nil {
		w.Tunnels = map[string]*TunnelHealth{}
	}
	return w, nil
}

// SaveWatchdog replaces the state atomically, stamping Updated.
func (d Dir) SaveWatchdog(w *Watchdog) error {
	stateDir := string(d)
	w.Updated = time.Now().UTC()
	return writeJSON(stateDir, WatchdogFile, w)
}
