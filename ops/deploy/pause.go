package deploy

import (
	"context"
	"log/slog"
	"os"
	"strings"
)

// PauseEnv is the environment variable by which the fault matrix's e2e
// tests stop mcpctl inside a takeover, to SIGKILL it exactly there:
// POINT=FILE makes mcpctl create FILE on reaching POINT and wait until it
// is killed. Nothing else sets it.
const PauseEnv = "MCPCTL_TEST_PAUSE"

// The points of a cutover's takeover where the fault matrix kills
// mcpctl; each is a state a dead mcpctl may leave behind.
const (
	// PauseVerified: the new slot is verified on its own listener and
	// still in standby (before SIGUSR1).
	PauseVerified = "verified"
	// PauseTookOver: the new slot accepts on the shared socket and so do
	// the old ones (before SIGUSR2).
	PauseTookOver = "took-over"
	// PauseParked: the cutover is verified and the old slot parked (before
	// the confirmation).
	PauseParked = "parked"
)

// PauseAt is Env.Pause for spec, PauseEnv's value.
func PauseAt(spec string, log *slog.Logger) func(ctx context.Context, point string) {
	want, file, _ := strings.Cut(spec, "=")
	return func(ctx context.Context, point string) {
		if point != want {
			return
		}
		log.Warn("paused for a test", "env", PauseEnv, "point", point)
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			log.Warn("pause", "err", err)
		}
		<-ctx.Done()
	}
}

// pause calls Env.Pause at point, when set.
func (e *Env) pause(ctx context.Context, point string) {
	if e.Pause != nil {
		e.Pause(ctx, point)
	}
}
