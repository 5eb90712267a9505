package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// capListener caps open connections like netutil.LimitListener, with a
// reserve: a connection accepted while max are open is a reserve connection,
// on which only health, readiness, metrics and small control calls are
// served (and which closes after its answer), so probes and control work are
// still answered at the cap. Past max+reserve, Accept waits for a close and
// new connections wait in the kernel's backlog.
//
// A place is held only by a connection that turns out to be a client: once
// half the places are taken, a new connection that has not sent a whole
// request header within crowdedHeader is closed, and answers close their
// connection instead of keeping it alive. So silent or trickling sockets
// cannot hold the places (reserve included) that probes and control calls
// need; the watchdog's own probe does not use this listener at all.
type capListener struct {
	net.Listener
	sem     chan struct{}
	done    chan struct{}
	once    sync.Once
	max     int
	crowdAt int
	header  time.Duration
	mu      sync.Mutex
	normal  int
	extra   int
	culled  atomic.Int64 // crowded connections closed for sending no request in time
}

// crowdedHeader is how long a connection accepted while crowded has to send
// its first request header.
const crowdedHeader = 2 * time.Second

func newCapListener(ln net.Listener, max, reserve int) *capListener {
	return &capListener{Listener: ln, sem: make(chan struct{}, max+reserve), done: make(chan struct{}), max: max,
		crowdAt: max / 2, header: crowdedHeader}
}

// crowded reports whether half the places are taken.
func (l *capListener) crowded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.normal+l.extra >= l.crowdAt
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
	crowded := l.normal+l.extra > l.crowdAt
	l.mu.Unlock()
	cc := &cappedConn{Conn: c, l: l, reserve: reserve}
	if crowded {
		cc.cull = time.AfterFunc(l.header, func() {
			if !cc.started.Load() {
				l.culled.Add(1)
				_ = cc.Close()
			}
		})
	}
	return cc, nil
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
	started atomic.Bool // a whole request header arrived
	cull    *time.Timer
}

func (c *cappedConn) Close() error {
	if c.cull != nil {
		c.cull.Stop()
	}
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

type connKey struct{}

// connContext lets the handler find its connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*cappedConn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

func connOf(r *http.Request) *cappedConn {
	cc, _ := r.Context().Value(connKey{}).(*cappedConn)
	return cc
}

// onReserveConn reports whether r came on a connection past the cap.
func onReserveConn(r *http.Request) bool {
	cc := connOf(r)
	return cc != nil && cc.reserve
}

// requestStarted marks r's connection as a client (a whole header came)
// and reports whether its answer should close it (crowded or reserve).
func requestStarted(r *http.Request) (closeAfter bool) {
	cc := connOf(r)
	if cc == nil {
		return false
	}
	cc.started.Store(true)
	return cc.reserve || cc.l.crowded()
}
