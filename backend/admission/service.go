package admission

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// The service's limits: while another process serves the same socket (a
// cutover's two slots), the limits hold for both together. Each process
// keeps its own queue, flows and fair shares; what it may start, and
// whether its queue is full, it judges by its own holdings plus what the
// others hold (their records in the Ledger), under the ledger's lock, and
// it publishes its own holdings before it lets go of that lock. So no
// decision of one process can overlook one of the other. Alone, it decides
// without the ledger: the fast path is as before.

// sharedState is the controller's part of the service's limits. Fields
// marked mu are guarded by the controller's mutex.
type sharedState struct {
	ledger   *Ledger
	together bool          // mu: another process has a record
	acked    uint64        // mu: the ledger epoch we decide under
	outside  atomic.Uint64 // the others' holdings at the last decision (0 alone)
	peers    atomic.Int64  // other processes with a record, at the last look
	reaped   atomic.Int64  // records of dead processes reclaimed
	looks    atomic.Int64  // looks at the ledger (tests wait on it)
	log      *slog.Logger
	heads    []peerHead   // mu: the others' oldest waiters at the last look (cross.go)
	yielded  yieldState   // mu: the heads yielded to, and since when
	yields   atomic.Int64 // waiters of another process a slot was left to
	lookedAt int64        // mu: monoNow at our last look at the ledger
}

// usage is what the decisions see: our holdings, plus the others' while
// shared. Caller holds mu.
func (c *Controller) usage() usage {
	s := c.state.Load()
	if c.sh.together {
		s = addUsage(s, c.sh.outside.Load())
	}
	return usageOf(s)
}

// enterShared takes the ledger's lock and reads the others' holdings.
// Caller holds mu and c.sh.together is set.
func (c *Controller) enterShared() {
	c.sh.ledger.Lock()
	// Deciding under the lock, we are current with whatever epoch it is.
	c.sh.acked = c.sh.ledger.Epoch()
	held, n := c.sh.ledger.Peers()
	c.sh.outside.Store(held)
	c.sh.peers.Store(int64(n))
	// The time of our last look serves: staleness is judged in tenths of
	// a second, and a clock read per decision would cost a system call.
	c.sh.heads = c.sh.ledger.Heads(c.sh.heads[:0], c.sh.lookedAt)
}

// publish writes our holdings, the epoch we decide under and our oldest
// waiters to our record. Caller holds mu and the ledger's lock.
func (c *Controller) publish() {
	c.sh.ledger.Publish(c.state.Load(), c.sh.acked, c.ownHeads())
}

// unlock releases mu; while shared it first publishes our holdings and
// lets go of the ledger's lock.
func (c *Controller) unlock() {
	if c.sh.together {
		c.publish()
		c.sh.ledger.Unlock()
	}
	c.mu.Unlock()
}

// Share makes the controller hold its limits together with every other
// process in ledger from now on, and watches the ledger every interval
// until ctx ends (the returned channel closes then): it takes up a change
// of membership (another process's record taken or freed), reclaims the
// record of a process that died once its cgroup is vacated, and, while
// shared, lets its waiters start when the others' holdings drop.
func (c *Controller) Share(ctx context.Context, ledger *Ledger, interval time.Duration, log *slog.Logger) <-chan struct{} {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Before Share returns: no decision of ours is made alone once the
	// others may count on our record.
	c.mu.Lock()
	c.sh.ledger, c.sh.log = ledger, log
	c.sync()
	c.unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.watch(ctx, ledger, interval)
	}()
	return done
}

func (c *Controller) watch(ctx context.Context, ledger *Ledger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.sh.looks.Add(1)
		c.mu.Lock()
		if c.sh.ledger == nil { // left
			c.mu.Unlock()
			return
		}
		if !c.sh.together && ledger.Epoch() == c.sh.acked {
			// Alone, and no record taken or freed since we looked.
			c.mu.Unlock()
			continue
		}
		c.sync()
		c.unlock()
	}
}

// sync takes up the ledger's membership under its lock: reclaims dead
// processes' records, decides whether we are shared, publishes our
// holdings and the epoch we now decide under, and dispatches (a peer gone
// frees its share). Caller holds mu; on return the ledger's lock is held
// exactly when c.sh.together (unlock releases it).
func (c *Controller) sync() {
	c.sh.ledger.Lock()
	if dead := c.sh.ledger.Reap(); len(dead) > 0 {
		c.sh.reaped.Add(int64(len(dead)))
		c.sh.log.Warn("admission: reclaimed the share of a process that died", "pids", dead)
	}
	held, n := c.sh.ledger.Peers()
	c.sh.acked = c.sh.ledger.Epoch()
	c.sh.lookedAt = monoNow()
	c.sh.ledger.Beat(c.sh.lookedAt)
	was := c.sh.together
	c.sh.together = n > 0
	c.sh.peers.Store(int64(n))
	if c.sh.together {
		c.sh.outside.Store(held)
		c.sh.heads = c.sh.ledger.Heads(c.sh.heads[:0], c.sh.lookedAt)
	} else {
		c.sh.outside.Store(0)
		c.sh.heads = c.sh.heads[:0]
	}
	c.publish()
	if was != c.sh.together {
		c.sh.log.Info("admission: limits held with other processes", "shared", c.sh.together, "others", n)
	}
	if !c.sh.together {
		c.sh.ledger.Unlock()
	}
	// While shared, a drop in the others' holdings frees capacity that
	// only a dispatch here hands to our waiters.
	c.dispatch(c.last)
}

// Shared reports whether other processes hold the limits with this one
// now (as of the last look): one atomic load.
func (c *Controller) Shared() bool { return c.sh.peers.Load() > 0 }

// Leave frees our record: the others take up our share at their next
// look. Call it once nothing of ours runs any more.
func (c *Controller) Leave() error {
	c.mu.Lock()
	l := c.sh.ledger
	if l == nil {
		c.mu.Unlock()
		return nil
	}
	c.sh.ledger, c.sh.together = nil, false
	c.sh.heads = nil
	c.sh.outside.Store(0)
	c.sh.peers.Store(0)
	c.mu.Unlock()
	return l.Close()
}

// serviceMetrics is the service-wide view for /metrics: nil when the
// controller shares no ledger.
func (c *Controller) serviceMetrics(own uint64) *mcpwire.ServiceMetrics {
	if c.sh.ledger == nil {
		return nil
	}
	out := c.sh.outside.Load()
	s := addUsage(own, out)
	total, nonControl := int64(field(s, shTotal)), int64(field(s, shNonControl))
	qc, qn := int64(field(s, shQControl)), int64(field(s, shQNormal))
	return &mcpwire.ServiceMetrics{
		Processes: 1 + int(c.sh.peers.Load()),
		Shared:    c.sh.together,
		Active:    mcpwire.Active{Total: total, Control: total - nonControl, NonControl: nonControl, Shell: int64(field(s, shShell))},
		Queued:    mcpwire.Queued{Total: qc + qn, Control: qc, NonControl: qn},
		Reclaimed: c.sh.reaped.Load(),
		Yielded:   c.sh.yields.Load(),
	}
}
