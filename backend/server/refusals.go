package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/audit"
	"github.com/overdeck/mcp-backend/backend/caller"
)

// A caller retrying at once on OVERLOADED can make tens of thousands of
// refusals a second; a log line each would fill the disk and make journald
// drop lines indiscriminately. Calls that never start (refused by the
// intake or by admission) are therefore counted per flow, tool and outcome
// and written once per interval with exact counts: the log rate is bounded
// by the number of distinct keys, whatever the request rate. Requests
// refused before they reached a tool (401, 403: no or a bad token, a tool
// outside the token's scopes) are counted the same way.

// refusalInterval is how often aggregated refusals are written.
const refusalInterval = time.Second

// maxRefusalKeys bounds the distinct keys of one interval; the rest are
// counted under one "other" line.
const maxRefusalKeys = 256

type refusalKey struct {
	status        int // HTTP status of a request refused before the tools; 0 for a tool call
	principalKind caller.Kind
	principal     string // pseudonym
	conversation  string // pseudonym
	tool          string
	outcome       string
	host          string // hostLabel: a bounded set
	reason        string // stableReason: a bounded set
}

// refusalLog aggregates refusals between flushes.
type refusalLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	counts map[refusalKey]int64
	other  int64
	start  time.Time
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, counts: map[refusalKey]int64{}, start: time.Now()}
}

// add counts one tool call refused.
func (l *refusalLog) add(cw caller.Caller, tool, outcome string) {
	l.count(refusalKey{principalKind: cw.Principal.Kind, principal: cw.PrincipalHash, conversation: cw.Conversation, tool: tool, outcome: outcome})
}

// addRequest counts one request refused with status before it reached a
// tool; who is nil when it was not authenticated.
func (l *refusalLog) addRequest(status int, who *caller.Caller, tool, outcome, host, reason string) {
	k := refusalKey{status: status, tool: tool, outcome: outcome, host: host, reason: stableReason(reason)}
	if who != nil {
		k.principalKind, k.principal, k.conversation = who.Principal.Kind, who.PrincipalHash, who.Conversation
	}
	l.count(k)
}

func (l *refusalLog) count(k refusalKey) {
	l.mu.Lock()
	if _, ok := l.counts[k]; ok || len(l.counts) < maxRefusalKeys {
		l.counts[k]++
	} else {
		l.other++
	}
	l.mu.Unlock()
}

// run flushes every interval until ctx ends, and once more then.
func (l *refusalLog) run(ctx context.Context) {
	t := time.NewTicker(refusalInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.flush()
			return
		case <-t.C:
			l.flush()
		}
	}
}

func (l *refusalLog) flush() {
	l.mu.Lock()
	counts, other, start := l.counts, l.other, l.start
	if len(counts) == 0 && other == 0 {
		l.start = time.Now()
		l.mu.Unlock()
		return
	}
	l.counts, l.other, l.start = make(map[refusalKey]int64, len(counts)), 0, time.Now()
	l.mu.Unlock()
	ms := time.Since(start).Milliseconds()
	for k, n := range counts {
		who := string(k.principalKind) + ":" + k.principal
		if k.principalKind == "" {
			who = "unauthenticated"
		}
		if k.status != 0 {
			l.log.Info("requests refused", "count", n, "intervalMs", ms, "status", k.status, "error", k.outcome, "reason", k.reason,
				"host", k.host, "tool", k.tool, "principal", who, "conversation", k.conversation)
			continue
		}
		l.log.Info("tool calls refused", "count", n, "intervalMs", ms, "tool", k.tool, "outcome", k.outcome,
			"principal", who, "conversation", k.conversation)
	}
	if other > 0 {
		l.log.Info("tool calls refused", "count", other, "intervalMs", ms, "tool", "*", "outcome", "*", "principal", "*", "conversation", "*")
	}
}

// maxReasonBytes bounds a refusal's reason in a line or a record.
const maxReasonBytes = 120

// stableReason is a refusal's reason without what the client chose: the
// token checks quote the key id, issuer or audience the token named
// (`unknown signing key "..."`), which would make every forged token a
// line and a record of its own. Each quoted text becomes "…", so what is
// left is one of a few texts.
func stableReason(why string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(why) && b.Len() < maxReasonBytes; i++ {
		c := why[i]
		switch {
		case quoted && c == '\\':
			i++ // an escaped byte, quote included
		case quoted && c == '"':
			quoted = false
			b.WriteString(`…"`)
		case quoted:
		default:
			b.WriteByte(c)
			quoted = c == '"'
		}
	}
	if quoted {
		b.WriteString(`…"`)
	}
	return audit.Bound(b.String(), maxReasonBytes)
}
