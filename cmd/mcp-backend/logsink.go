package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
)

// catchSIGPIPE makes a write to a closed stdout or stderr return EPIPE
// instead of killing the process. Under systemd both are a stream to
// journald; stopping journald closes it, and without this the next log
// line would end the backend (SIGPIPE, which systemd counts as a clean
// exit) in the middle of a drain. A caught signal, unlike an ignored one,
// is reset for the commands the tools run.
func catchSIGPIPE() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGPIPE)
	go func() {
		for range c {
		}
	}()
}

// logSink is the process's log stream: stderr while it takes writes, then,
// once a write fails (journald restarted and closed the stream), each line
// sent to the journal's socket, which a restarted journald binds again.
// Without a journal the lines are dropped: logging never stops the
// backend.
type logSink struct {
	mu      sync.Mutex
	w       io.Writer
	broken  bool
	journal func(line []byte) error
}

func newLogSink(w io.Writer) *logSink {
	return &logSink{w: w, journal: journalLine}
}

// Write takes one whole line (slog's handlers write a record at once).
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.broken {
		if _, err := s.w.Write(p); err == nil {
			return len(p), nil
		}
		s.broken = true
	}
	_ = s.journal(p)
	return len(p), nil
}

// journalLine sends a JSON log line to the journal at its level's
// priority; systemd attributes it to the unit by the sender's cgroup.
func journalLine(line []byte) error {
	if !journal.Enabled() {
		return nil
	}
	line = bytes.TrimRight(line, "\n")
	var rec struct {
		Level string `json:"level"`
	}
	_ = json.Unmarshal(line, &rec)
	prio := journal.PriInfo
	switch rec.Level {
	case "DEBUG":
		prio = journal.PriDebug
	case "WARN":
		prio = journal.PriWarning
	case "ERROR":
		prio = journal.PriErr
	}
	return journal.Send(string(line), prio, map[string]string{"SYSLOG_IDENTIFIER": "mcp-backend"})
}
