package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
)

// maxSafeID is the largest integer id that survives the SDK, which decodes
// numeric ids through float64.
const maxSafeID = 1<<53 - 1

// validID returns "" for an id the answer will echo exactly (absent, null,
// a string, or an integer within ±(2^53-1)), else why it is refused.
func validID(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || string(b) == "null" || b[0] == '"' {
		return ""
	}
	if len(b) > maxIDBytes {
		return "id too long"
	}
	digits := b
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || strings.Trim(string(digits), "0123456789") != "" {
		return "id must be a string or an integer"
	}
	if len(digits) > 16 || (len(digits) == 16 && string(digits) > "9007199254740991") {
		return "numeric id outside ±(2^53-1); send it as a string"
	}
	return ""
}

// rpcErrorWriter turns a plain-text error the SDK (or our guards) write on
// /mcp into a JSON-RPC error object with the same status, so every refusal
// a client gets there is machine-readable.
type rpcErrorWriter struct {
	http.ResponseWriter
	status int
	text   bytes.Buffer
}

func (w *rpcErrorWriter) WriteHeader(code int) {
	if code >= 400 && w.status == 0 && !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rpcErrorWriter) Write(b []byte) (int, error) {
	if w.status != 0 {
		if w.text.Len() < 1024 {
			w.text.Write(b[:min(len(b), 1024-w.text.Len())])
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *rpcErrorWriter) Flush() {
	if w.status == 0 {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (w *rpcErrorWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *rpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held error as JSON-RPC.
func (w *rpcErrorWriter) finish() {
	if w.status == 0 {
		return
	}
	h := w.ResponseWriter.Header()
	h.Del("X-Content-Type-Options")
	h.Del("Content-Length")
	code := -32600
	if w.status >= 500 {
		code = -32603
	}
	msg := strings.TrimSpace(w.text.String())
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	writeRPCErrorID(w.ResponseWriter, w.status, nil, code, msg)
}

// rpcErrors wraps an /mcp handler so its errors are JSON-RPC objects.
func rpcErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &rpcErrorWriter{ResponseWriter: w}
		defer ew.finish()
		h.ServeHTTP(ew, r)
	})
}

func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	writeRPCErrorID(w, status, nil, code, msg)
}

// writeRPCErrorID writes a JSON-RPC error; id nil is written as null.
func writeRPCErrorID(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	var idv any = id
	if id == nil {
		idv = nil
	}
	writeJSON(w, status, map[string]any{
		"jsonrpc": "2.0", "id": idv,
		"error": map[string]any{"code": code, "message": msg},
	})
}
