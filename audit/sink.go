package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// Journal is the systemd journal over its native socket protocol: each
// field its own journal field, queryable as `journalctl MCP_TOOL=...`.
type Journal struct{}

// JournalAvailable reports whether the journal's socket takes datagrams.
func JournalAvailable() bool { return journal.Enabled() }

// UnderSystemd reports whether this process runs as a systemd unit (it has
// an invocation id), where the journal is the place for records.
func UnderSystemd() bool { return os.Getenv("INVOCATION_ID") != "" }

// Write sends r to the journal.
func (Journal) Write(r Record) error {
	vars := make(map[string]string, len(r.Fields)+1)
	for _, f := range r.Fields {
		vars[f.Name] = f.Value
	}
	if !r.Time.IsZero() {
		vars[FieldTime] = FormatTime(r.Time)
	}
	prio := journal.PriInfo
	if vars[FieldLost] != "" {
		prio = journal.PriWarning
	}
	if err := journal.Send(r.Message, prio, vars); err != nil {
		return fmt.Errorf("audit: journal: %w", err)
	}
	return nil
}

// Close does nothing: the socket is shared by the process.
func (Journal) Close() error { return nil }

// File is a JSON-lines file, one record per line with the journal's field
// names as keys (and TIME), rotated at MaxBytes into PATH.1 ... PATH.Keep.
type File struct {
	path     string
	maxBytes int64
	keep     int
	mu       sync.Mutex
	f        *os.File
	size     int64
	buf      bytes.Buffer
}

// OpenFile opens (appending) or creates the file at path, mode 0600.
func OpenFile(path string, maxBytes int64, keep int) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	s := &File{path: path, maxBytes: maxBytes, keep: keep}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *File) open() error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit file: %w", err)
	}
	s.f, s.size = f, st.Size()
	return nil
}

// Write appends r as one line, rotating first when it would pass MaxBytes.
func (s *File) Write(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("audit file: closed")
	}
	s.buf.Reset()
	EncodeJSON(&s.buf, r)
	if s.maxBytes > 0 && s.size > 0 && s.size+int64(s.buf.Len()) > s.maxBytes {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	n, err := s.f.Write(s.buf.Bytes())
	s.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	return nil
}

// rotate renames PATH.k to PATH.k+1 (the oldest falls off), PATH to
// PATH.1, and starts a new PATH.
func (s *File) rotate() error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	s.f.Close()
	s.f = nil
	for k := s.keep - 1; k >= 1; k-- {
		_ = os.Rename(s.path+"."+strconv.Itoa(k), s.path+"."+strconv.Itoa(k+1))
	}
	if s.keep > 0 {
		if err := os.Rename(s.path, s.path+".1"); err != nil {
			return fmt.Errorf("audit file: rotate: %w", err)
		}
	} else if err := os.Remove(s.path); err != nil {
		return fmt.Errorf("audit file: rotate: %w", err)
	}
	return s.open()
}

// Close syncs and closes the file.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}

// EncodeJSON writes r as one JSON object (TIME, MESSAGE, then the fields
// in order) and a newline: the file sink's line.
func EncodeJSON(b *bytes.Buffer, r Record) {
	b.WriteString(`{"TIME":`)
	writeJSONString(b, FormatTime(r.Time))
	b.WriteString(`,"MESSAGE":`)
	writeJSONString(b, r.Message)
	for _, f := range r.Fields {
		b.WriteByte(',')
		writeJSONString(b, f.Name)
		b.WriteByte(':')
		writeJSONString(b, f.Value)
	}
	b.WriteString("}\n")
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// FormatTime is a time as the records carry it: RFC 3339, UTC,
// nanoseconds.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Discard is a sink that takes everything and keeps nothing (audit off).
type Discard struct{}

// Write drops r.
func (Discard) Write(Record) error { return nil }

// Close does nothing.
func (Discard) Close() error { return nil }
