package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/lockfile"
	"github.com/overdeck/mcp-backend/ops/state"
)

// lockWaitFlag bounds how long a command that changes the host (or a fleet
// run) waits for a lock another command holds: a watchdog round or a
// snapshot lets go within moments, a cutover does not.
func lockWaitFlag() cli.Flag {
	return &cli.DurationFlag{Name: "lock-wait", Value: state.DefaultLockWait,
		Usage: "how long a command that changes the host waits for the mcpctl lock while another command holds it, `D` (0: fail at once)"}
}

// lockWait is --lock-wait (the app's Before refuses a negative one).
func lockWait(c *cli.Context) time.Duration { return max(c.Duration("lock-wait"), 0) }

// lockWaiting says once, on stderr, who holds the lock being waited for.
func lockWaiting(d *deps, what string, wait time.Duration) func(*lockfile.Holder) {
	return func(h *lockfile.Holder) {
		who := "a process that did not say who it is"
		if h != nil {
			who = h.String()
		}
		fmt.Fprintf(d.stderr, "waiting up to %s for the %s: %s holds it\n", wait, what, who)
	}
}

// stateLock takes the host's mcpctl lock for a command of package main,
// waiting as --lock-wait says.
func stateLock(c *cli.Context, d *deps, stateDir, owner string) (func() error, error) {
	wait := lockWait(c)
	return state.Dir(stateDir).LockWait(c.Context, owner, wait, lockWaiting(d, "mcpctl lock", wait))
}
