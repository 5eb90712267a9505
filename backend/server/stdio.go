package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport is the MCP stdio transport with a line filter in front of
// the SDK's: the SDK ends the whole session on one line it cannot decode
// (cancelling every call in flight), so each line is checked first, as an
// HTTP body is (step 3 of call.go's chain; batches are refused), and a
// malformed one is answered with a JSON-RPC error and dropped while the
// session goes on. Lines longer than the request limit are refused the
// same way.
func (s *Server) StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	return stdioTransport(in, out, int(s.maxBody()))
}

func stdioTransport(in io.Reader, out io.Writer, maxLine int) mcp.Transport {
	pr, pw := io.Pipe()
	lw := &lockedWriter{w: out}
	go func() { pw.CloseWithError(filterLines(in, pw, lw, maxLine)) }()
	return &mcp.IOTransport{Reader: pr, Writer: lw}
}

// lockedWriter keeps our error lines and the SDK's messages whole: each
// Write is one complete line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) Close() error { return nil }

// filterLines copies well-formed lines from in to pass and answers the rest
// on out. It returns nil at the end of in.
func filterLines(in io.Reader, pass io.Writer, out io.Writer, maxLine int) error {
	br := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > maxLine+1 {
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		eof := err != nil
		switch {
		case tooLong:
			writeLineError(out, nil, -32600, "invalid request: line longer than the request limit")
		case len(bytes.TrimSpace(line)) > 0:
			if id, code, why := checkLine(line); code != 0 {
				writeLineError(out, id, code, why)
			} else {
				if line[len(line)-1] != '\n' {
					line = append(line, '\n')
				}
				if _, err := pass.Write(line); err != nil {
					return err
				}
			}
		}
		line, tooLong = line[:0], false
		if eof {
			return nil
		}
	}
}

// checkLine is the HTTP body's validation for one line: one JSON-RPC
// message per line; the id to answer with when it is readable.
func checkLine(line []byte) (json.RawMessage, int, string) {
	msg, code, why := parseMessage(line, false)
	return msg.ID, code, why
}

func writeLineError(out io.Writer, id json.RawMessage, code int, msg string) {
	var idv any
	if id != nil && string(bytes.TrimSpace(id)) != "null" {
		idv = id
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": idv, "error": map[string]any{"code": code, "message": msg}})
	_, _ = out.Write(append(b, '\n'))
}
