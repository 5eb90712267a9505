package state

import (
	"fmt"
	"time"
)

// Watchdog is the watchdog's memory between timer runs: consecutive probe
// failures per tunnel, so that one blip restarts nothing.
type Watchdog struct {
	Updated time.Time                `json:"updated"`
	Tunnels map[string]*TunnelHealth `json:"tunnels"`
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
