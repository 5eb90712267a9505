package audit

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Refusal is one request refused before it was admitted: an HTTP 401/403,
// or a tools/call answered OVERLOADED, UNAVAILABLE or CANCELLED while
// queued. Equal refusals within one window become one record with their
// exact count, so a flood stays far below journald's rate limit.
type Refusal struct {
	Status  int    // HTTP status: 401, 403; 200 when a tool result refused
	Outcome string // the error code (OVERLOADED, ...) or the OAuth error (invalid_token, ...)
	Scope   string // whose limit or which check: conversation, principal, server (OVERLOADED); auth, tool-scope, host, origin
	Reason  string // why, short and stable (queue-full, queue-timeout, queue-cancelled, memory, body-budget, connections, restarting, the auth error's description); never a token
	Tool    string
	// The flow: who, through which Host. Principal fields are empty when
	// the request was refused before it was authenticated.
	PrincipalKind, Principal, PrincipalHash, Conversation, Host string
}

// maxFlows bounds the distinct refusals held per window; more fold into
// one record per scope with principal "*", still counted exactly.
const maxFlows = 4096

type aggregator struct {
	l      *Log
	window time.Duration
	mu     sync.Mutex
	counts map[Refusal]int64
	since  time.Time
	stop   chan struct{}
	done   chan struct{}
}

func newAggregator(l *Log, window time.Duration) *aggregator {
	a := &aggregator{l: l, window: window, counts: map[Refusal]int64{}, since: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// Refused counts one refusal into the current window.
func (l *Log) Refused(r Refusal) {
	if l == nil {
		return
	}
	// Every field is part of the key: bounded, so no refusal holds (or
	// writes) more than a few hundred bytes.
	r.Reason, r.Tool, r.Host = Bound(r.Reason, ValueBytes), Bound(r.Tool, ValueBytes), Bound(r.Host, ValueBytes)
	r.Outcome, r.Scope = Bound(r.Outcome, ValueBytes), Bound(r.Scope, ValueBytes)
	r.PrincipalKind, r.Principal = Bound(r.PrincipalKind, ValueBytes), Bound(r.Principal, ValueBytes)
	r.PrincipalHash, r.Conversation = Bound(r.PrincipalHash, ValueBytes), Bound(r.Conversation, ValueBytes)
	l.agg.add(r, 1, time.Time{})
}

// add counts n refusals r into the current window; a window that carries
// the counts of a lost record starts at since, that record's start.
func (a *aggregator) add(r Refusal, n int64, since time.Time) {
	a.mu.Lock()
	if _, ok := a.counts[r]; !ok && len(a.counts) >= maxFlows {
		r = Refusal{Status: r.Status, Outcome: r.Outcome, Scope: r.Scope, Principal: "*", Reason: "more distinct refusals than one window holds"}
	}
	a.counts[r] += n
	if !since.IsZero() && since.Before(a.since) {
		a.since = since
	}
	a.mu.Unlock()
}

func (a *aggregator) run() {
	defer close(a.done)
	t := time.NewTicker(a.window)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			a.flush()
		case <-a.stop:
			a.flush()
			return
		}
	}
}

func (a *aggregator) close() {
	close(a.stop)
	<-a.done
}

// flush emits one record per distinct refusal of the window just ended.
func (a *aggregator) flush() {
	a.mu.Lock()
	counts, since := a.counts, a.since
	now := time.Now()
	a.counts, a.since = map[Refusal]int64{}, now
	a.mu.Unlock()
	// A fixed order, so equal windows give equal records.
	type keyed struct {
		sortKey string
		k       Refusal
	}
	keys := make([]keyed, 0, len(counts))
	for k := range counts {
		keys = append(keys, keyed{fmt.Sprint(k), k})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].sortKey < keys[j].sortKey })
	for _, kk := range keys {
		k := kk.k
		n := counts[k]
		r := Record{Time: now, Event: EventRefused}
		who := k.PrincipalKind + ":" + k.Principal
		if k.PrincipalKind == "" {
			who = "unauthenticated"
		}
		r.Message = fmt.Sprintf("refused %d× %s %s (%s) for %s", n, k.Tool, k.Outcome, k.Scope, who)
		r.Add(FieldStatus, strconv.Itoa(k.Status))
		r.Add(FieldOutcome, k.Outcome)
		r.Add(FieldScope, k.Scope)
		r.Add(FieldReason, k.Reason)
		r.Add(FieldTool, k.Tool)
		r.Add(FieldPrincipalKind, k.PrincipalKind)
		r.Add(FieldPrincipal, k.Principal)
		r.Add(FieldPrincipalHash, k.PrincipalHash)
		r.Add(FieldConversation, k.Conversation)
		r.Add(FieldHost, k.Host)
		r.AddInt(FieldCount, n)
		r.Add(FieldWindowStart, FormatTime(since))
		r.AddInt(FieldWindowMs, now.Sub(since).Milliseconds())
		// Lost (a journal that stopped reading), its counts go into the
		// next window: the refusals of an outage reach the trail after
		// it, exactly, while each window's record still tries the sink
		// (the first it takes ends audit.onFailure refuse).
		r.lost = func() { a.add(k, n, since) }
		a.l.Emit(r)
	}
}
