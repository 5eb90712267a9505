package jobs

import (
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/jsonsize"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Streams of a job's output.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Output reads up to max bytes of stream from offset. The chunk is the
// exact bytes: as text when they are valid UTF-8 (a rune cut at the end
// is left for the next chunk; a rune longer than max is sent whole),
// base64 otherwise; its JSON encoding stays within encBudget bytes. A
// chunk before the end is never empty.
func (m *Manager) Output(c caller.Caller, id, stream string, offset, max int64, encBudget int) (mcpwire.JobChunk, error) {
	m.mu.Lock()
	j, err := m.lookupLocked(c, id)
	m.mu.Unlock()
	if err != nil {
		return mcpwire.JobChunk{}, err
	}
	done := m.refresh(j)
	return readChunk(j.dir, stream, offset, max, encBudget, done)
}

func readChunk(dir, stream string, offset, max int64, encBudget int, done bool) (mcpwire.JobChunk, error) {
	ch := mcpwire.JobChunk{Stream: stream, Offset: offset, NextOffset: offset, Encoding: mcpwire.EncodingUTF8}
	name := stdoutFile
	switch stream {
	case Stdout:
	case Stderr:
		name = stderrFile
	default:
		return ch, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"stream\": must be stdout or stderr (got %q)", stream)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		ch.EOF = done && offset == 0
		if offset > 0 {
			return ch, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"offset\": %d is past the end of %s (0 bytes)", offset, stream)
		}
		return ch, nil
	}
	if err != nil {
		return ch, toolerr.New(mcpwire.CodeUnavailable, "jobs: read %s: %v", stream, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ch, toolerr.New(mcpwire.CodeUnavailable, "jobs: read %s: %v", stream, err)
	}
	ch.Total = fi.Size()
	if offset > ch.Total {
		return ch, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"offset\": %d is past the end of %s (%d bytes)", offset, stream, ch.Total)
	}
	// base64 takes 4 bytes per 3 and text up to 6 per byte: read no more
	// than the budget can carry either way.
	if b := int64(encBudget) / 6; encBudget > 0 && max > b {
		max = b
	}
	n := min(max, ch.Total-offset)
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return ch, toolerr.New(mcpwire.CodeUnavailable, "jobs: read %s: %v", stream, err)
	}
	buf = buf[:k]
	text := buf
	// A rune cut by the chunk's end completes in the next chunk.
	if cut := incompleteTail(buf); cut > 0 && offset+int64(k) < ch.Total {
		text = buf[:len(buf)-cut]
		if len(text) == 0 {
			// maxBytes is smaller than the character at offset: the
			// chunk is that whole character, so a client paging by
			// nextOffset always moves on.
			w := make([]byte, min(utf8.UTFMax, ch.Total-offset))
			if k, _ := f.ReadAt(w, offset); k > 0 {
				if r, size := utf8.DecodeRune(w[:k]); r != utf8.RuneError || size > 1 {
					buf, text = w[:size], w[:size]
				}
			}
		}
	}
	// Never an empty chunk before the end: bytes that are no whole
	// character go as base64.
	if len(text) > 0 && utf8.Valid(text) && (encBudget <= 0 || jsonsize.Max(string(text)) <= encBudget) || len(buf) == 0 {
		ch.Data = string(text)
		ch.NextOffset = offset + int64(len(text))
	} else {
		ch.Data, ch.Encoding = base64.StdEncoding.EncodeToString(buf), mcpwire.EncodingBase64
		ch.NextOffset = offset + int64(len(buf))
	}
	ch.EOF = done && ch.NextOffset == ch.Total
	return ch, nil
}

// incompleteTail is how many bytes at the end of b are the start of a rune
// that does not end within b (0 when none).
func incompleteTail(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}
