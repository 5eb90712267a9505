package server

import (
	"context"
	"log/slog"
)

// quieter passes on only records at or above min. The SDK logs three Info
// lines per stateless request (connecting, connected, disconnected): noise in
// the journal and a measurable share of a call's cost, so it gets warnings
// only, while our own one line per tool call stays.
type quieter struct {
	slog.Handler
	min slog.Level
}

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= q.min && q.Handler.Enabled(ctx, l)
}

func (q quieter) WithAttrs(as []slog.Attr) slog.Handler {
	return quieter{q.Handler.WithAttrs(as), q.min}
}

func (q quieter) WithGroup(name string) slog.Handler {
	return quieter{q.Handler.WithGroup(name), q.min}
}

func sdkLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quieter{log.Handler(), slog.LevelWarn})
}
