package server

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// silentBus is a D-Bus "system bus" that accepts connections, reads what
// it is sent and never answers: the stuck bus no deadline would survive.
func silentBus(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bus")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "unix:path=" + path
}

// TestServiceToolsStuckBusFreeSlots: service.status and service.control
// against a bus that never answers end with a structured, retryable error
// within their D-Bus deadline, and every slot they held comes back.
func TestServiceToolsStuckBusFreeSlots(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", silentBus(t))
	const maxActive = 4
	b := startBackend(t, func(c *config.Config) {
		c.Concurrency.MaxActive = maxActive
		c.Concurrency.ReservedControl = 2
		c.Concurrency.MaxShell = 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	calls := []struct {
		tool string
		args map[string]any
	}{
		{mcpwire.ToolServiceStatus, map[string]any{"unit": "a.service"}},
		{mcpwire.ToolServiceStatus, map[string]any{"unit": "b.service"}},
		{mcpwire.ToolServiceStatus, map[string]any{"unit": "c.service"}},
		{mcpwire.ToolServiceControl, map[string]any{"unit": "d.service", "action": "restart"}},
	}
	codes := make([]string, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, body, err := callRaw(ctx, b.url, c.tool, c.args)
			if err != nil || st != 200 {
				codes[i] = "http error"
				t.Errorf("%s: status %d, err %v (the call did not end by its D-Bus deadline)", c.tool, st, err)
				return
			}
			codes[i] = parseReply(t, body).errorCode()
		}()
	}
	// The negative control: while the bus says nothing, the calls hold
	// every slot.
	held := false
	for !held && ctx.Err() == nil {
		held = b.metrics(t).Active.Total == maxActive
		time.Sleep(20 * time.Millisecond)
	}
	if !held {
		t.Fatal("the calls never held all slots")
	}
	wg.Wait()
	for i, code := range codes {
		if code != string(mcpwire.CodeTimeout) && code != string(mcpwire.CodeUnavailable) {
			t.Errorf("%s: outcome %q, want TIMEOUT or UNAVAILABLE", calls[i].tool, code)
		}
	}
	m := b.metrics(t)
	if m.Active.Total != 0 || m.Counters.Completed != m.Counters.Accepted {
		t.Fatalf("slots not back: active %d, accepted %d, completed %d", m.Active.Total, m.Counters.Accepted, m.Counters.Completed)
	}
	st, body, err := callRaw(ctx, b.url, mcpwire.ToolSystemInfo, map[string]any{})
	if err != nil || st != 200 || parseReply(t, body).errorCode() != "" {
		t.Fatalf("system.info after the stuck calls: %d %v %.200s", st, err, body)
	}
}
