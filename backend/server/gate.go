package server

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// gateListener accepts from a listening socket shared with another process
// only while open. A closed gate leaves every connection queued on the
// socket to the other process, without closing this process's descriptor,
// so that it can open again at once: a parked slot takes over again with no
// start, no bind and no gap.
type gateListener struct {
	net.Listener
	mu      sync.Mutex
	open    bool
	changed chan struct{} // closed and replaced at every change of open
	done    chan struct{}
	once    sync.Once
}

func newGateListener(ln net.Listener, open bool) *gateListener {
	return &gateListener{Listener: ln, open: open, changed: make(chan struct{}), done: make(chan struct{})}
}

// deadliner is the part of *net.TCPListener and *net.UnixListener that
// wakes an Accept blocked in the kernel's wait.
type deadliner interface{ SetDeadline(time.Time) error }

// set opens or closes the gate. Closing it wakes an Accept blocked on the
// socket (a deadline in the past), so no connection is taken after set
// returns, except one the kernel handed over at that very moment: that one
// is this process's, and it is served. A listener without deadlines keeps
// its blocked Accept until one more connection.
func (g *gateListener) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == open {
		return
	}
	g.open = open
	close(g.changed)
	g.changed = make(chan struct{})
	if d, ok := g.Listener.(deadliner); ok {
		if open {
			_ = d.SetDeadline(time.Time{})
		} else {
			_ = d.SetDeadline(time.Unix(1, 0))
		}
	}
}

func (g *gateListener) Accept() (net.Conn, error) {
	for {
		g.mu.Lock()
		open, changed := g.open, g.changed
		g.mu.Unlock()
		if !open {
			select {
			case <-changed:
				continue
			case <-g.done:
				return nil, net.ErrClosed
			}
		}
		c, err := g.Listener.Accept()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The gate closed while this Accept waited.
			continue
		}
		return c, err
	}
}

func (g *gateListener) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.Listener.Close()
}
