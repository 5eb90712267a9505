package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/tools"
)

// BenchmarkToolCallHTTP compares system.info through the real handler (one
// shared server, admission, request tracking, budget) with the anchor: the
// go-sdk's own stateless handler serving a no-op tool without admission.
//
//	go test -run '^$' -bench ToolCallHTTP -benchmem ./backend/server/
func BenchmarkToolCallHTTP(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"system.info","arguments":{}}}`)
	b.Run("anchor-sdk-noop", func(b *testing.B) {
		srv := mcp.NewServer(&mcp.Implementation{Name: "anchor", Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "system.info"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, struct{}, error) {
			return nil, struct{}{}, nil
		})
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
		benchPost(b, h, body)
	})
	// The same tools without this package's layer (guard, request
	// tracking, admission, budget, per-call log): what system.info itself
	// costs over a no-op, so the difference to the next line is ours.
	b.Run("sdk-with-backend-tools", func(b *testing.B) {
		srv := mcp.NewServer(&mcp.Implementation{Name: "tools-only", Version: "1"}, nil)
		tools.New(tools.Options{}).Register(srv)
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
		benchPost(b, h, body)
	})
	b.Run("mcp-backend-system.info", func(b *testing.B) {
		bk := startBackend(b, nil)
		benchPost(b, bk.srv.Handler(), body)
	})
}

// benchPost posts body to h's /mcp from 8 clients in parallel; header is
// name, value pairs to send with each request.
func benchPost(b *testing.B, h http.Handler, body []byte, header ...string) {
	hs := httptest.NewServer(h)
	defer hs.Close()
	client := hs.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	// Enough clients in flight that the server, not the round trip, is
	// the bottleneck: calls per second is a throughput figure.
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkFileWrite6MiB measures what one 6 MiB file.write allocates
// through the real handler. This package adds one exactly sized body buffer
// (read under the budget, let go of once the SDK has its copy); the SDK
// reads and decodes the body several more times on its own.
//
//	go test -run '^$' -bench FileWrite6MiB -benchmem -benchtime 20x ./backend/server/
func BenchmarkFileWrite6MiB(b *testing.B) {
	path := filepath.Join(b.TempDir(), "out")
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file.write","arguments":{"path":%q,"content":"`, path)
	body := []byte(head + strings.Repeat("x", 6<<20-len(head)-4) + `"}}}`)
	b.Run("mcp-backend", func(b *testing.B) {
		bk := startBackend(b, nil)
		b.ReportAllocs()
		benchPost(b, bk.srv.Handler(), body)
	})
}
