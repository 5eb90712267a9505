package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// shellAs runs one shell.exec in conversation conv (and, when subject is
// set, as that asserted principal) and reports its outcome code ("" = ok).
func shellAs(ctx context.Context, url, subject, conv, command string) string {
	params := map[string]any{"name": "shell.exec", "arguments": map[string]any{"command": command}}
	meta := map[string]any{}
	if conv != "" {
		meta["openai/session"] = conv
	}
	if subject != "" {
		meta["openai/subject"] = subject
	}
	params["_meta"] = meta
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, rpcID.Add(1), mustJSON(params))
	status, b, err := post(ctx, url+"/mcp", []byte(body))
	if err != nil {
		return "transport"
	}
	if status != http.StatusOK {
		return fmt.Sprintf("HTTP %d", status)
	}
	r := parseReplyQuiet(b)
	return r
}

// groupShares runs closed-loop clients (each calls again as soon as its
// call ends) in groups, over real HTTP, and returns each group's share of
// the calls completed in a window after a warm-up. With commands of equal
// length, a group's share of completions is its share of slot time.
func groupShares(t *testing.T, url string, clients []int, flowOf func(group, client, call int) (subject, conv string)) []float64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const warmup, window = 30, 160
	var total atomic.Int64
	counts := make([]atomic.Int64, len(clients))
	var snap []int64
	var snapOnce sync.Once
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g, n := range clients {
		for c := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for call := 0; ctx.Err() == nil; call++ {
					sub, conv := flowOf(g, c, call)
					// Commands long against a client's round trip: a
					// conversation whose client is between calls cannot
					// claim its slot, so a short command would measure the
					// clients' gaps rather than the scheduler.
					if shellAs(ctx, url, sub, conv, "sleep 0.15") != "" {
						continue
					}
					counts[g].Add(1)
					switch n := total.Add(1); {
					case n == warmup:
						snapOnce.Do(func() {
							for i := range counts {
								snap = append(snap, counts[i].Load())
							}
						})
					case n == warmup+window:
						close(done)
					}
				}
			}()
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("no progress")
	}
	got := make([]int64, len(clients))
	for i := range counts {
		got[i] = counts[i].Load()
	}
	cancel()
	wg.Wait()
	shares := make([]float64, len(clients))
	var sum float64
	for i := range got {
		sum += float64(got[i] - snap[i])
	}
	for i := range got {
		shares[i] = float64(got[i]-snap[i]) / sum
	}
	return shares
}

// withinMargin reports whether every measured share is within margin of
// the expected one.
func withinMargin(got, want []float64, margin float64) bool {
	for i := range got {
		if math.Abs(got[i]-want[i]) > margin {
			return false
		}
	}
	return true
}

// TestFairShareOverHTTP: uniform closed-loop clients in three
// conversations (6, 2 and 1 clients) over 4 shell slots get the max-min
// fair allocation of the slots (1.5, 1.5, 1 of 4), not shares proportional
// to their number of clients. Conversations are told apart only by
// _meta["openai/session"] on fresh HTTP requests, as ChatGPT sends them.
// The negative control, the same clients with no conversation identity (all
// one flow: what a FIFO controller sees), comes out proportional to the
// clients and fails the same check.
func TestFairShareOverHTTP(t *testing.T) {
	if testing.Short() {
		// The shares are proven exactly by the dispatcher's fake-clock
		// simulation (backend/admission TestSimulatedShares); this is the
		// smoke test that the real handler feeds it: 90 s of CPU on 2 cores.
		t.Skip("-short: the shares' exact proof is backend/admission TestSimulatedShares")
	}
	// The negative control is off by about 0.29; measured runs, on a 2-core
	// machine with other work, within 0.09.
	const margin = 0.12
	clients := []int{6, 2, 1}
	want := []float64{1.5 / 4, 1.5 / 4, 1.0 / 4}
	start := func(t *testing.T) *backend {
		return startBackend(t, func(c *config.Config) {
			c.Concurrency.MaxActive, c.Concurrency.ReservedControl, c.Concurrency.MaxShell, c.Concurrency.MaxQueue = 12, 2, 4, 32
			c.Concurrency.FlowReserve = 0 // pure max-min shares; the reserve is tested below
		})
	}
	t.Run("conversations", func(t *testing.T) {
		b := start(t)
		got := groupShares(t, b.url, clients, func(g, _, _ int) (string, string) { return "", fmt.Sprintf("group-%d", g) })
		t.Logf("shares %.3f, max-min fair %.3f, margin %.2f", got, want, margin)
		if !withinMargin(got, want, margin) {
			t.Fatalf("shares %.3f, want %.3f within %.2f", got, want, margin)
		}
	})
	t.Run("principals minting conversations", func(t *testing.T) {
		// Each group is its own (asserted) principal; the busiest mints a
		// conversation per call: it still gets its principal's share.
		b := start(t)
		got := groupShares(t, b.url, clients, func(g, c, call int) (string, string) {
			conv := "c"
			if g == 0 {
				conv = fmt.Sprintf("minted-%d-%d", c, call)
			}
			return fmt.Sprintf("user-%d", g), conv
		})
		t.Logf("shares %.3f, max-min fair %.3f, margin %.2f", got, want, margin)
		if !withinMargin(got, want, margin) {
			t.Fatalf("shares %.3f, want %.3f within %.2f", got, want, margin)
		}
	})
	t.Run("negative control: one flow", func(t *testing.T) {
		b := start(t)
		got := groupShares(t, b.url, clients, func(int, int, int) (string, string) { return "", "" })
		t.Logf("shares %.3f without flow identity", got)
		if withinMargin(got, want, margin) {
			t.Fatalf("one flow came out fair (%.3f): the check cannot tell fair from FIFO", got)
		}
	})
}

// TestGreedyConversationDoesNotLockOthersOut: the lock-out of the first
// report, scaled down: a greedy conversation keeps 40 calls in flight and
// retries at once on OVERLOADED, beside three polite conversations making
// one call at a time with a pause. Every polite call is answered ok (the
// reserve and the queue share let them in) and the greedy one still gets
// work done. The negative control puts the polite calls in the greedy
// conversation (no flow identity): they are refused.
func TestGreedyConversationDoesNotLockOthersOut(t *testing.T) {
	run := func(t *testing.T, politeConv func(i int) string) (politeOK, politeN int, greedyOK int64) {
		b := startBackend(t, func(c *config.Config) {
			c.Concurrency.MaxActive, c.Concurrency.ReservedControl, c.Concurrency.MaxShell, c.Concurrency.MaxQueue = 16, 4, 4, 16
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var greedy atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if shellAs(ctx, b.url, "", "greedy", "sleep 0.3") == "" {
						greedy.Add(1)
					} else {
						time.Sleep(2 * time.Millisecond) // "at once", kind to a 2-core test machine
					}
				}
			}()
		}
		proctest.Eventually(t, "the greedy conversation fills the queue", func() bool { return b.metrics(t).Queued.Total >= 16 })
		results := make(chan string, 3*10)
		var pwg sync.WaitGroup
		for i := range 3 {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				for range 10 {
					results <- shellAs(context.Background(), b.url, "", politeConv(i), "sleep 0.05; echo ok")
					time.Sleep(50 * time.Millisecond)
				}
			}()
		}
		pwg.Wait()
		cancel()
		wg.Wait()
		close(results)
		for r := range results {
			politeN++
			if r == "" {
				politeOK++
			}
		}
		return politeOK, politeN, greedy.Load()
	}
	t.Run("conversations", func(t *testing.T) {
		ok, n, greedy := run(t, func(i int) string { return fmt.Sprintf("polite-%d", i) })
		t.Logf("polite %d/%d ok, greedy %d ok", ok, n, greedy)
		if float64(ok) < 0.95*float64(n) || greedy == 0 {
			t.Fatalf("polite %d/%d ok, greedy %d ok: want >= 95%% polite and greedy progressing", ok, n, greedy)
		}
	})
	t.Run("negative control: one flow", func(t *testing.T) {
		ok, n, _ := run(t, func(int) string { return "greedy" })
		t.Logf("polite %d/%d ok inside the greedy conversation", ok, n)
		if float64(ok) >= 0.95*float64(n) {
			t.Fatalf("polite calls in the greedy flow all got in (%d/%d): the test cannot fail", ok, n)
		}
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// parseReplyQuiet is parseReply's outcome code for use off the test
// goroutine: "" ok, a tool error code, or "bad reply".
func parseReplyQuiet(b []byte) string {
	var r toolReply
	if err := json.Unmarshal(b, &r); err != nil || (r.Result == nil && r.Error == nil) {
		return "bad reply"
	}
	if r.Error != nil {
		return "jsonrpc error"
	}
	return r.errorCode()
}

// TestFlowsInMetrics: /metrics shows the flows (JSON and Prometheus, a
// bounded set of series) with hashed ids only: neither a conversation id
// nor a session id appears in either format.
func TestFlowsInMetrics(t *testing.T) {
	b := startBackend(t, nil)
	g := newGate(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shellAs(context.Background(), b.url, "", fmt.Sprintf("secret-conversation-%d", i%2), g.command())
		}()
	}
	proctest.Eventually(t, "8 calls running", func() bool { return b.metrics(t).Active.Shell == 7 && b.metrics(t).Queued.Total == 1 })
	m := b.metrics(t)
	if m.Flows == nil || m.Flows.Busy != 2 || len(m.Flows.Top) != 2 || m.Flows.Top[0].Active+m.Flows.Top[1].Active != 7 {
		t.Fatalf("flows %+v", m.Flows)
	}
	_, js, _ := get(t, b.url+"/metrics", "application/json")
	_, text, _ := get(t, b.url+"/metrics", "text/plain")
	for _, out := range []string{js, text} {
		if strings.Contains(out, "secret-conversation") {
			t.Fatalf("a raw conversation id in /metrics:\n%s", out)
		}
	}
	for _, series := range []string{`mcp_flows{level="busy"} 2`, `mcp_flow_top_active{rank="1",principal_kind="anonymous"`, "mcp_admission_displaced_total 0"} {
		if !strings.Contains(text, series) {
			t.Fatalf("Prometheus text lacks %s:\n%s", series, text)
		}
	}
	g.open(t)
	wg.Wait()
}

func get(t testing.TB, url, accept string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestRefusalFloodLogsBounded: 2,000 refused calls from a caller retrying
// at once write a handful of aggregated log lines whose counts add up to
// exactly the refusals, not a line each.
func TestRefusalFloodLogsBounded(t *testing.T) {
	cfg := config.Default()
	cfg.Concurrency.MaxShell, cfg.Concurrency.MaxQueue, cfg.Concurrency.FlowReserve = 1, 0, 0
	logs := &lockedWriter{w: &bytes.Buffer{}}
	srv := newServer(t, cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	g := newGate(t)
	held := make(chan string, 1)
	go func() { held <- shellAs(context.Background(), hs.URL, "", "greedy", g.command()) }()
	b := &backend{srv: srv, url: hs.URL}
	proctest.Eventually(t, "the shell slot taken", func() bool { return b.metrics(t).Active.Shell == 1 })
	const n = 2000
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n / 8 {
				if shellAs(context.Background(), hs.URL, "", fmt.Sprintf("greedy-%d", w%2), "true") == "OVERLOADED" {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	g.open(t)
	<-held
	srv.Close() // flushes the last interval
	time.Sleep(50 * time.Millisecond)
	var lines, counted int64
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct {
			Msg   string `json:"msg"`
			Count int64  `json:"count"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec.Msg == "tool calls refused" {
			lines++
			counted += rec.Count
		}
		if rec.Msg == "tool call" && strings.Contains(line, "OVERLOADED") {
			t.Fatalf("a refusal logged on its own: %s", line)
		}
	}
	t.Logf("%d refusals, %d aggregated log lines", refused.Load(), lines)
	if refused.Load() != n || counted != n || lines > 40 {
		t.Fatalf("%d refused, %d counted in %d lines: want %d in a few lines", refused.Load(), counted, lines, n)
	}
}
