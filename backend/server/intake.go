package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// HTTPLimits bound what clients can make the HTTP layer hold, whatever they
// send: request-body bytes in flight, how long a body may take to arrive
// and how many connections are open.
type HTTPLimits struct {
	// BodyBudget is the process-wide budget of request-body bytes held at
	// once (read, parsed and decoded by the SDK until the request ends).
	// Past it a request is refused at once with a structured answer.
	BodyBudget int64
	// BodyTimeout bounds the read of one whole body; BodyIdleTimeout the
	// wait for its next bytes, so a client stalled mid-body (slowloris) is
	// cut off soon while a slow upload that keeps moving is not.
	BodyTimeout, BodyIdleTimeout time.Duration
	// MaxConns caps open connections; ReserveConns more are accepted past
	// the cap for /healthz, /readyz, /metrics and small control calls only.
	MaxConns, ReserveConns int
	// WriteTimeout bounds the writing of one answer, from its first byte:
	// a client that never reads cannot hold the connection, the answer's
	// memory and its call's cancel entry for ever.
	WriteTimeout time.Duration
}

// Fixed parts of the intake: small bodies (any control call) may use a small
// reserve past the budget, so a budget filled by large uploads never refuses
// control work; sniffBytes is what a refusal reads to find the request id.
const (
	smallBody     = 64 << 10
	smallReserve  = 4 << 20
	sniffBytes    = 4 << 10
	minBodyBudget = 128 << 20
)

// defaultHTTPLimits derives the limits from the largest body: the budget
// holds at least four of them; the connection cap leaves room for every
// slot and queue place plus keep-alive connections of idle clients.
func defaultHTTPLimits(maxBody int64, maxActive, maxQueue int) HTTPLimits {
	return HTTPLimits{
		BodyBudget:      max(minBodyBudget, 4*maxBody),
		BodyTimeout:     60 * time.Second,
		BodyIdleTimeout: 5 * time.Second,
		MaxConns:        max(256, 4*(maxActive+maxQueue)),
		ReserveConns:    16,
		WriteTimeout:    30 * time.Second,
	}
}

// bodyBudget counts request-body bytes held, process-wide.
type bodyBudget struct {
	limit   int64
	used    atomic.Int64
	peak    atomic.Int64
	refused atomic.Int64
	timeout atomic.Int64
}

// take reserves n bytes, or reports false without reserving anything.
func (b *bodyBudget) take(n int64) bool {
	ceiling := b.limit
	if n <= smallBody {
		ceiling += smallReserve
	}
	for {
		u := b.used.Load()
		if u+n > ceiling {
			b.refused.Add(1)
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *bodyBudget) give(n int64) { b.used.Add(-n) }

// Reasons a body was not read.
var (
	errBodyBudget  = errors.New("request-body budget exhausted")
	errBodyTooBig  = errors.New("request body too large")
	errBodyTimeout = errors.New("request body not received in time")
)

// readBody reads the whole body under the budget and the body deadline. The
// bytes stay reserved until release runs (when the request ends: the SDK
// holds copies of the body until then).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	var held int64
	release = func() { s.budget.give(held); held = 0 }
	if r.ContentLength > limit {
		return nil, release, errBodyTooBig
	}
	rc := http.NewResponseController(w)
	end := time.Now().Add(s.httpLim.BodyTimeout)
	var abandoned atomic.Bool
	extend := func() {
		if !abandoned.Load() {
			d := time.Now().Add(s.httpLim.BodyIdleTimeout)
			if d.After(end) {
				d = end
			}
			_ = rc.SetReadDeadline(d)
			if abandoned.Load() { // lost a race with the drain: it wins
				_ = rc.SetReadDeadline(time.Now())
			}
		}
	}
	extend()
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	in := &progressReader{r: r.Body, progress: extend}
	// A drain that gives up on a request still reading its body ends the
	// read, so the connection is answered and freed.
	stop := context.AfterFunc(s.abandonCtx, func() { abandoned.Store(true); _ = rc.SetReadDeadline(time.Now()) })
	defer stop()

	// Bytes are reserved as they arrive, in growing steps, never as a
	// declared Content-Length: slow uploads hold only what they sent, so
	// they cannot fill the budget against control calls. A declared length
	// caps the steps (and the allocation) at exactly that.
	ceiling := limit
	if r.ContentLength >= 0 {
		ceiling = r.ContentLength
	}
	for {
		if len(body) == cap(body) {
			if r.ContentLength >= 0 && int64(len(body)) == ceiling {
				return body, release, nil // net/http reads no further
			}
			step := min(max(int64(cap(body)), 64<<10), ceiling+1-int64(cap(body)))
			if r.ContentLength >= 0 {
				step = min(step, ceiling-int64(cap(body)))
			}
			if step <= 0 {
				return nil, release, errBodyTooBig
			}
			if !s.budget.take(step) {
				return body, release, errBodyBudget
			}
			held += step
			nb := make([]byte, len(body), int64(cap(body))+step)
			copy(nb, body)
			body = nb
		}
		n, err := in.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if int64(len(body)) > limit {
			return nil, release, errBodyTooBig
		}
		if err == io.EOF {
			if r.ContentLength >= 0 && int64(len(body)) < r.ContentLength {
				return body, release, readErr(io.ErrUnexpectedEOF)
			}
			return body, release, nil
		}
		if err != nil {
			return body, release, readErr(err)
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errBodyTimeout
	}
	return fmt.Errorf("reading request body: %w", err)
}

// progressReader calls progress after every read that returned bytes.
type progressReader struct {
	r        io.Reader
	progress func()
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}

// refuseBody answers a request whose body was not read. A tools/call whose
// id is readable from what arrived gets the OVERLOADED (or UNAVAILABLE)
// tool result a client retries on, inside HTTP 200; anything else a
// JSON-RPC error. The rest of the body is never read: the connection closes.
func (s *Server) refuseBody(w http.ResponseWriter, r *http.Request, got []byte, limit int64, err error) {
	w.Header().Set("Connection", "close")
	if errors.Is(err, errBodyTooBig) {
		writeRPCError(w, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("request body over %d bytes", limit))
		return
	}
	if len(got) < sniffBytes && errors.Is(err, errBodyBudget) {
		// Only what is already on its way: a short deadline, no reservation.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, sniffBytes)
		n := copy(buf, got)
		m, _ := io.ReadAtLeast(r.Body, buf[n:], len(buf)-n)
		got = buf[:n+m]
		_ = rc.SetReadDeadline(time.Time{})
	}
	id, method, name := sniffRequest(got)
	restarting := s.abandonCtx.Err() != nil
	switch {
	case errors.Is(err, errBodyBudget):
		if method == "tools/call" && id != nil {
			res := encodeResult(s.serverOverloaded(toolerr.New(mcpwire.CodeOverloaded, "backend overloaded: the request-body budget (%d bytes) is in use; retry later", s.httpLim.BodyBudget), admission.KindOf(name)))
			s.auditShed(r, nil, name, res)
			s.writeToolResult(w, id, res)
			return
		}
		writeRPCErrorID(w, http.StatusServiceUnavailable, id, -32000, "backend overloaded: request-body budget in use; retry later")
	case errors.Is(err, errBodyTimeout) && restarting:
		if method == "tools/call" && id != nil {
			s.writeToolResult(w, id, s.restartResult)
			return
		}
		writeRPCErrorID(w, http.StatusServiceUnavailable, id, -32000, "backend restarting; retry")
	case errors.Is(err, errBodyTimeout):
		writeRPCErrorID(w, http.StatusRequestTimeout, id, -32600, fmt.Sprintf("request body not received in time (%s without data or %s in all)", s.httpLim.BodyIdleTimeout, s.httpLim.BodyTimeout))
	default:
		writeRPCErrorID(w, http.StatusBadRequest, id, -32700, err.Error())
	}
}

// sniffRequest finds the id, method and params.name of a JSON-RPC object
// from a prefix of it, as far as the prefix goes. An id is returned only
// when it is one we would echo (see validID).
func sniffRequest(b []byte) (id json.RawMessage, method, name string) {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, "", ""
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return
		}
		key, _ := t.(string)
		switch key {
		case "id":
			var raw json.RawMessage
			if d.Decode(&raw) != nil {
				return
			}
			if validID(raw) == "" {
				id = raw
			}
		case "method":
			if d.Decode(&method) != nil {
				return
			}
		case "params":
			if t, err := d.Token(); err != nil || t != json.Delim('{') {
				return
			}
			for d.More() {
				t, err := d.Token()
				if err != nil {
					return
				}
				if t == "name" {
					if d.Decode(&name) != nil {
						return
					}
					continue
				}
				var skip json.RawMessage
				if d.Decode(&skip) != nil {
					return
				}
			}
			if _, err := d.Token(); err != nil {
				return
			}
		default:
			var skip json.RawMessage
			if d.Decode(&skip) != nil {
				return
			}
		}
	}
	return
}

// dropReader hands the body to the SDK once and lets go of it at EOF, so
// our copy is freed as soon as the SDK has its own.
type dropReader struct{ b []byte }

func (d *dropReader) Read(p []byte) (int, error) {
	if len(d.b) == 0 {
		d.b = nil
		return 0, io.EOF
	}
	n := copy(p, d.b)
	d.b = d.b[n:]
	return n, nil
}

func (d *dropReader) Close() error { d.b = nil; return nil }

// deadlineWriter sets the connection's write deadline when an answer
// starts, so writing it is bounded whatever the client does; the handler
// then returns and the connection closes.
type deadlineWriter struct {
	http.ResponseWriter
	d    time.Duration
	once sync.Once
}

func (w *deadlineWriter) arm() {
	w.once.Do(func() { _ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.d)) })
}

func (w *deadlineWriter) WriteHeader(code int) { w.arm(); w.ResponseWriter.WriteHeader(code) }

func (w *deadlineWriter) Write(b []byte) (int, error) { w.arm(); return w.ResponseWriter.Write(b) }

func (w *deadlineWriter) Flush() {
	w.arm()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxBody bounds a request: a file.write of the largest output plus
// encoding overhead fits.
func (s *Server) maxBody() int64 { return s.cfg.Limits.ResponseBytes + 1<<20 }

// SetHTTPLimits replaces the HTTP limits; call it before Handler or Serve.
func (s *Server) SetHTTPLimits(l HTTPLimits) {
	s.httpLim = l
	s.budget = &bodyBudget{limit: l.BodyBudget}
}

// HTTPLimits are the limits in force.
func (s *Server) HTTPLimits() HTTPLimits { return s.httpLim }
