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
// (cancelling every call in flight), so each line is checked first, and a
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

// checkLine returns a JSON-RPC error code for a line the SDK could not
// decode as a message (or would answer under another id), and the id to
// answer with when it is readable.
func checkLine(line []byte) (json.RawMessage, int, string) {
	b := bytes.TrimSpace(line)
	if b[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(b, &batch); err != nil {
			return nil, -32700, "parse error: the line is not valid JSON"
		}
		if len(batch) == 0 {
			return nil, -32600, "invalid request: empty batch"
		}
		for _, m := range batch {
			if _, code, why := checkMessage(m); code != 0 {
				return nil, code, why
			}
		}
		return nil, 0, ""
	}
	return checkMessage(b)
}

func checkMessage(b []byte) (json.RawMessage, int, string) {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(b) {
			return nil, -32700, "parse error: the line is not valid JSON"
		}
		return nil, -32600, "invalid request: want a JSON-RPC 2.0 object"
	}
	if why := validID(m.ID); why != "" {
		return nil, -32600, "invalid request: " + why
	}
	id := m.ID
	if m.JSONRPC != "2.0" {
		return id, -32600, `invalid request: want a JSON-RPC 2.0 object with "jsonrpc":"2.0"`
	}
	if m.Method != nil {
		var s string
		if json.Unmarshal(m.Method, &s) != nil {
			return id, -32600, "invalid request: method must be a string"
		}
	} else if len(bytes.TrimSpace(m.ID)) == 0 || string(bytes.TrimSpace(m.ID)) == "null" {
		return nil, -32600, "invalid request: a response needs an id"
	}
	return nil, 0, ""
}

func writeLineError(out io.Writer, id json.RawMessage, code int, msg string) {
	var idv any
	if id != nil && string(bytes.TrimSpace(id)) != "null" {
		idv = id
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": idv, "error": map[string]any{"code": code, "message": msg}})
	_, _ = out.Write(append(b, '\n'))
}
