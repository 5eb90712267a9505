package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// sessionHeader is the Streamable HTTP session header.
const sessionHeader = "Mcp-Session-Id"

// Bounds of the per-client state. In-flight entries live exactly as long
// as their HTTP request, so admission (maxActive + maxQueue, the rest shed
// at once) bounds them already; the cap guards against a server that
// admits more than it should. Early cancels are the state a client can
// create without a call: capped and expired.
const (
	maxEarlyCancels = 1024
	earlyCancelTTL  = 10 * time.Second
)

// callKey names one call: request ids are chosen per client and collide
// across clients, so the client's session id scopes them.
type callKey struct{ session, id string }

// cancelScope links an MCP notifications/cancelled that arrives in its own
// HTTP request (the TypeScript SDK sends one per AbortSignal) to the call it
// names. The SDK serves each request of a stateless server in a fresh
// session and cannot do it: the call's request is another session.
//
// A session id is 128 random bits issued in the answer to initialize; the
// server keeps no table of sessions, so nothing about a session dies with
// the process: after a restart the client's id is accepted as it is and
// keeps scoping its calls. An id scopes cancellation only, grants nothing
// (admission, auth and the tool checks apply to every request), and one
// client cannot name another's calls without knowing its id.
type cancelScope struct {
	mu       sync.Mutex
	inflight map[callKey]context.CancelFunc
	early    map[callKey]earlyCancel // cancels that came before their call
	order    []earlyRef              // early cancels in arrival order (so in expiry order)
	owners   map[string]int          // early cancels held per principal
	maxCalls int
	now      func() time.Time

	issued       atomic.Int64 // session ids issued at initialize
	notices      atomic.Int64 // notifications/cancelled received with a session id
	delivered    atomic.Int64 // of those, cancelled a call in flight (at once or when it arrived)
	earlyDropped atomic.Int64 // early cancels expired or evicted unused
	untracked    atomic.Int64 // calls not tracked because the in-flight cap was reached
}

// earlyCancel is a cancel held for a call that has not arrived: until when,
// and for whom (the principal that sent it, so one caller's flood of
// cancels evicts its own, not another's).
type earlyCancel struct {
	exp   time.Time
	owner string
}

type earlyRef struct {
	key callKey
	exp time.Time
}

func newCancelScope(maxCalls int) *cancelScope {
	return &cancelScope{
		inflight: make(map[callKey]context.CancelFunc),
		early:    make(map[callKey]earlyCancel),
		owners:   make(map[string]int),
		maxCalls: maxCalls,
		now:      time.Now,
	}
}

// maxSessionKey bounds the session part of a key: ids we issue are 22
// bytes; a longer one a client sends is kept as its hash.
const maxSessionKey = 64

func sessionKey(s string) string {
	if len(s) <= maxSessionKey {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SessionStats is the "sessions" object of /metrics.
type SessionStats struct {
	Issued          int64 `json:"issued"`
	InFlight        int   `json:"inFlight"`
	InFlightCap     int   `json:"inFlightCap"`
	Untracked       int64 `json:"untracked"`
	CancelNotices   int64 `json:"cancelNotifications"`
	CancelDelivered int64 `json:"cancelsDelivered"`
	EarlyCancels    int   `json:"earlyCancels"`
	EarlyCancelCap  int   `json:"earlyCancelCap"`
	EarlyCancelTTL  int64 `json:"earlyCancelTtlMs"`
	EarlyDropped    int64 `json:"earlyCancelsDropped"`
}

func (c *cancelScope) stats() SessionStats {
	c.mu.Lock()
	c.expire(c.now())
	inflight, early := len(c.inflight), len(c.early)
	c.mu.Unlock()
	return SessionStats{
		Issued:          c.issued.Load(),
		InFlight:        inflight,
		InFlightCap:     c.maxCalls,
		Untracked:       c.untracked.Load(),
		CancelNotices:   c.notices.Load(),
		CancelDelivered: c.delivered.Load(),
		EarlyCancels:    early,
		EarlyCancelCap:  maxEarlyCancels,
		EarlyCancelTTL:  earlyCancelTTL.Milliseconds(),
		EarlyDropped:    c.earlyDropped.Load(),
	}
}

// begin is the HTTP layer's hook for one JSON-RPC message: it issues a
// session id in the answer to initialize, delivers a cancel notification,
// and returns the context a tools/call runs under (cancelled by a later
// notification naming it) with the function that forgets the call.
func (c *cancelScope) begin(w http.ResponseWriter, r *http.Request, msg rpcMessage, owner string) (context.Context, func()) {
	session := sessionKey(r.Header.Get(sessionHeader))
	switch {
	case msg.Method == "initialize" && len(msg.ID) > 0:
		// The SDK in stateless mode sets no session header; the client
		// sends this one back on every request.
		w.Header().Set(sessionHeader, c.newSession())
	case msg.Method == "notifications/cancelled" && session != "":
		if len(msg.Params.RequestID) > maxIDBytes || validID(msg.Params.RequestID) != "" {
			// No call of ours has such an id: bounded like message ids.
			c.notices.Add(1)
			c.earlyDropped.Add(1)
			break
		}
		c.cancel(callKey{session, rawID(msg.Params.RequestID)}, owner)
	case msg.Method == "tools/call" && session != "" && len(msg.ID) > 0:
		return c.track(r.Context(), callKey{session, rawID(msg.ID)})
	}
	return r.Context(), func() {}
}

func (c *cancelScope) newSession() string {
	var b [16]byte
	_, _ = io.ReadFull(rand.Reader, b[:]) // crypto/rand does not fail on Linux
	c.issued.Add(1)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// track registers a call; a cancel that came first cancels it at once.
func (c *cancelScope) track(parent context.Context, k callKey) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.early[k]; ok {
		c.forget(k, e)
		if c.now().Before(e.exp) {
			c.delivered.Add(1)
			cancel()
			return ctx, cancel
		}
		c.earlyDropped.Add(1)
	}
	if _, dup := c.inflight[k]; dup || len(c.inflight) >= c.maxCalls {
		// A duplicate id in one session is the client's error; an entry
		// over the cap would be state past the bounds. Either way the
		// call still runs and still ends with its HTTP request.
		c.untracked.Add(1)
		return ctx, cancel
	}
	c.inflight[k] = cancel
	return ctx, func() {
		c.mu.Lock()
		delete(c.inflight, k)
		c.mu.Unlock()
		cancel()
	}
}

// cancel cancels the call k names, or remembers the cancel for a while when
// the call has not arrived yet (the two requests race on separate
// connections). Held cancels expire on time; when the table is full the
// oldest cancel of the principal holding the most goes.
func (c *cancelScope) cancel(k callKey, owner string) {
	c.notices.Add(1)
	if k.id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel, ok := c.inflight[k]; ok {
		delete(c.inflight, k)
		c.delivered.Add(1)
		cancel()
		return
	}
	now := c.now()
	c.expire(now)
	if e, ok := c.early[k]; ok {
		c.forget(k, e) // a repeat: it moves to the back
	}
	if len(c.early) >= maxEarlyCancels {
		c.evictFrom(c.busiestOwner())
	}
	e := earlyCancel{exp: now.Add(earlyCancelTTL), owner: owner}
	c.early[k] = e
	c.owners[owner]++
	c.order = append(c.order, earlyRef{k, e.exp})
}

// forget removes a held cancel. Caller holds mu.
func (c *cancelScope) forget(k callKey, e earlyCancel) {
	delete(c.early, k)
	if c.owners[e.owner]--; c.owners[e.owner] <= 0 {
		delete(c.owners, e.owner)
	}
}

// live reports whether ref still names a held cancel (not consumed,
// evicted or replaced since).
func (c *cancelScope) live(ref earlyRef) bool {
	e, ok := c.early[ref.key]
	return ok && e.exp.Equal(ref.exp)
}

// expire drops held cancels past their time, oldest first, and compacts
// the order list. Caller holds mu.
func (c *cancelScope) expire(now time.Time) {
	i := 0
	for ; i < len(c.order); i++ {
		ref := c.order[i]
		if !c.live(ref) {
			continue
		}
		if now.Before(ref.exp) {
			break
		}
		c.forget(ref.key, c.early[ref.key])
		c.earlyDropped.Add(1)
	}
	c.order = c.order[i:]
	if len(c.order) > 2*maxEarlyCancels { // stale refs of consumed cancels
		live := c.order[:0]
		for _, ref := range c.order {
			if c.live(ref) {
				live = append(live, ref)
			}
		}
		c.order = live
	}
}

func (c *cancelScope) busiestOwner() string {
	best, n := "", -1
	for o, m := range c.owners {
		if m > n {
			best, n = o, m
		}
	}
	return best
}

// evictFrom drops owner's oldest held cancel. Caller holds mu.
func (c *cancelScope) evictFrom(owner string) {
	for _, ref := range c.order {
		if c.live(ref) && c.early[ref.key].owner == owner {
			c.forget(ref.key, c.early[ref.key])
			c.earlyDropped.Add(1)
			return
		}
	}
}

// rawID is a JSON-RPC id in a canonical form: 7 and "7" stay distinct ids,
// spacing does not matter.
func rawID(id json.RawMessage) string {
	var b bytes.Buffer
	if len(id) == 0 || json.Compact(&b, id) != nil || b.String() == "null" {
		return ""
	}
	return b.String()
}
