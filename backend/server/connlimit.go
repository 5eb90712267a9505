package server

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// capListener caps open connections like netutil.LimitListener, with a
// reserve: a connection accepted while max are open is a reserve connection,
// on which only health, readiness, metrics and small control calls are
// served (and which closes after its answer), so probes and control work are
// still answered at the cap. Past max+reserve, Accept waits for a close and
// new connections wait in the kernel's backlog.
type capListener struct {
	net.Listener
	sem    chan struct{}
	done   chan struct{}
	once   sync.Once
	max    int
	mu     sync.Mutex
	normal int
	extra  int
}

func newCapListener(ln net.Listener, max, reserve int) *capListener {
	return &capListener{Listener: ln, sem: make(chan struct{}, max+reserve), done: make(chan struct{}), max: max}
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	l.mu.Lock()
	reserve := l.normal >= l.max
	if reserve {
		l.extra++
	} else {
		l.normal++
	}
	l.mu.Unlock()
	return &cappedConn{Conn: c, l: l, reserve: reserve}, nil
}

func (l *capListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// open returns the normal and reserve connections open now.
func (l *capListener) open() (normal, reserve int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.normal, l.extra
}

type cappedConn struct {
	net.Conn
	l       *capListener
	reserve bool
	once    sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.reserve {
			c.l.extra--
		} else {
			c.l.normal--
		}
		c.l.mu.Unlock()
		<-c.l.sem
	})
	return err
}

type reserveConnKey struct{}

// connContext marks the requests of a reserve connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*cappedConn); ok && cc.reserve {
		return context.WithValue(ctx, reserveConnKey{}, true)
	}
	return ctx
}

func onReserveConn(r *http.Request) bool {
	v, _ := r.Context().Value(reserveConnKey{}).(bool)
	return v
}
