package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/backend/caller"
)

// A caller retrying at once on OVERLOADED can make tens of thousands of
// refusals a second; a log line each would fill the disk and make journald
// drop lines indiscriminately. Calls that never start (refused by the
// intake or by admission) are therefore counted per flow, tool and outcome
// and written once per interval with exact counts: the log rate is bounded
// by the number of distinct keys, whatever the request rate.

// refusalInterval is how often aggregated refusals are written.
const refusalInterval = time.Second

// maxRefusalKeys bounds the distinct keys of one interval; the rest are
// counted under one "other" line.
const maxRefusalKeys = 256

type refusalKey struct {
	principalKind caller.Kind
	principal     string // hash
	conversation  string // hash
	tool          string
	outcome       string
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

// add counts one refusal.
func (l *refusalLog) add(cw caller.Caller, tool, outcome string) {
	k := refusalKey{cw.Principal.Kind, cw.Principal.Hash(), cw.Conversation, tool, outcome}
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
		l.log.Info("tool calls refused", "count", n, "intervalMs", ms, "tool", k.tool, "outcome", k.outcome,
			"principal", string(k.principalKind)+":"+k.principal, "conversation", k.conversation)
	}
	if other > 0 {
		l.log.Info("tool calls refused", "count", other, "intervalMs", ms, "tool", "*", "outcome", "*", "principal", "*", "conversation", "*")
	}
}
