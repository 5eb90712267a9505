package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/overdeck/mcp-backend/backend/admission"
	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestControlPreemptsQueuedNormalWorkOverHTTP: with every slot busy and the
// queue full of normal and shell calls, control calls over real HTTP are not
// refused: each takes the place of the youngest queued non-control call,
// which gets OVERLOADED at once. The older queued calls keep their place and
// complete; /metrics counts the preemptions and everything balances.
func TestControlPreemptsQueuedNormalWorkOverHTTP(t *testing.T) {
	b := startBackend(t, func(c *config.Config) {
		c.Concurrency.MaxActive, c.Concurrency.ReservedControl, c.Concurrency.MaxShell, c.Concurrency.MaxQueue, c.Concurrency.QueueWaitMs = 12, 2, 10, 8, 600000
	})
	g := newGate(t)
	call := func(tool string, args map[string]any) string {
		status, body, err := callRaw(context.Background(), b.url, tool, args)
		if err != nil || status != http.StatusOK {
			return "HTTP error"
		}
		return parseReply(t, body).errorCode()
	}
	shell := map[string]any{"command": g.command()}

	// Every non-control slot runs a gated shell command.
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); call("shell.exec", shell) }()
	}
	proctest.Eventually(t, "10 shells running", func() bool { return b.metrics(t).Active.Shell == 10 })
	// The queue fills with shell and normal calls, one at a time so their
	// age is known.
	queued := make([]chan string, 8)
	for i := range queued {
		queued[i] = make(chan string, 1)
		tool, args := "shell.exec", shell
		if i%2 == 1 {
			tool, args = "file.list", map[string]any{"path": "/"}
		}
		go func() { queued[i] <- call(tool, args) }()
		proctest.Eventually(t, "call queued", func() bool { return b.metrics(t).Queued.NonControl == int64(i+1) })
	}
	// The reserved control slots are busy too: held on the server's own
	// controller, since no control tool runs long enough to hold one.
	var held []*admission.Permit
	for i := 0; i < 2; i++ {
		p, err := b.srv.Admission().Acquire(context.Background(), admission.Control)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	if s := b.metrics(t); s.Active.Total != 12 || s.Queued.Total != 8 {
		t.Fatalf("not saturated: %+v %+v", s.Active, s.Queued)
	}

	const controls = 5
	ctl := make(chan string, controls)
	for i := 0; i < controls; i++ {
		tool := []string{"system.info", "process.list"}[i%2]
		go func() { ctl <- call(tool, map[string]any{}) }()
	}
	// The five youngest queued calls are refused at once, before any slot
	// frees; the three oldest keep waiting.
	for i := 7; i >= 8-controls; i-- {
		if got := <-queued[i]; got != "OVERLOADED" {
			t.Fatalf("queued call %d (of the youngest): %q, want OVERLOADED", i, got)
		}
	}
	// The snapshot is read without the scheduler's lock, so the counters
	// may trail the answers by a moment: wait for them, then check.
	var s mcpwire.Metrics
	proctest.Eventually(t, "preemptions counted", func() bool {
		s = b.metrics(t)
		return s.Counters.Preempted == controls && s.Counters.Rejected == controls
	})
	if s.Queued.Control != controls || s.Queued.NonControl != 8-controls {
		t.Fatalf("after preemption: counters %+v queued %+v", s.Counters, s.Queued)
	}
	for i := 0; i < 8-controls; i++ {
		select {
		case got := <-queued[i]:
			t.Fatalf("older queued call %d answered %q while it should still wait", i, got)
		default:
		}
	}
	// Control slots free up: every control call succeeds.
	for _, p := range held {
		p.Release()
	}
	for i := 0; i < controls; i++ {
		if got := <-ctl; got != "" {
			t.Fatalf("control call: %q, want success", got)
		}
	}
	g.open(t)
	wg.Wait()
	for i := 0; i < 8-controls; i++ {
		if got := <-queued[i]; got != "" {
			t.Fatalf("older queued call %d: %q, want success", i, got)
		}
	}
	assertBalanced(t, b, 10+8+controls+len(held))

	// Both /metrics formats show the count.
	req, _ := http.NewRequest(http.MethodGet, b.url+"/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "mcp_admission_preempted_total 5\n") {
		t.Fatalf("Prometheus text lacks the preempted count:\n%s", text)
	}
	if got := b.metrics(t).Counters.Preempted; got != controls {
		t.Fatalf("/metrics counters.preempted = %d, want %d", got, controls)
	}
}
