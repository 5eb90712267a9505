package main

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
)

type failAfter struct {
	n     int
	lines []string
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(f.lines) >= f.n {
		return 0, syscall.EPIPE
	}
	f.lines = append(f.lines, string(p))
	return len(p), nil
}

// Once stderr refuses a line (journald closed the stream), that line and
// every later one go to the journal, and no write fails: logging never
// stops the backend.
func TestLogSinkFallsBackToTheJournal(t *testing.T) {
	for _, c := range []struct {
		name       string
		okWrites   int
		journalErr error
		stream     []string
		journal    []string
	}{
		{"stream alive", 3, nil, []string{"a", "b", "c"}, nil},
		{"stream closed after one", 1, nil, []string{"a"}, []string{"b", "c"}},
		{"closed and no journal", 0, errors.New("no journal"), nil, []string{"a", "b", "c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &failAfter{n: c.okWrites}
			var sent []string
			s := newLogSink(w)
			s.journal = func(line []byte) error {
				sent = append(sent, strings.TrimSpace(string(line)))
				return c.journalErr
			}
			for _, l := range []string{"a", "b", "c"} {
				if n, err := s.Write([]byte(l + "\n")); err != nil || n != 2 {
					t.Fatalf("write %q: %d, %v", l, n, err)
				}
			}
			var stream []string
			for _, l := range w.lines {
				stream = append(stream, strings.TrimSpace(l))
			}
			if !slices.Equal(stream, c.stream) || !slices.Equal(sent, c.journal) {
				t.Errorf("stream %q journal %q, want %q and %q", stream, sent, c.stream, c.journal)
			}
		})
	}
}
