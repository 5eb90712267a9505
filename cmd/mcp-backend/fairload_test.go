package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestFairShareLoad is the load run of the fair-share work, against the
// real process with the default limits: one greedy conversation keeping 120
// shell.exec calls in flight and retrying at once on OVERLOADED, beside
// three polite conversations that make one call at a time ("sleep 0.2;
// echo ok", 300 ms pause), for 25 s. It reports each conversation's calls,
// answers and time to answer; it asserts the targets of the work (polite
// >= 95 % ok, the greedy one >= 40 % of what the shell slots could run).
// It takes minutes and loads both cores, so it runs only on demand:
//
//	MCP_BACKEND_FAIRLOAD=1 go test -count=1 -run TestFairShareLoad -v ./cmd/mcp-backend/
func TestFairShareLoad(t *testing.T) {
	if os.Getenv("MCP_BACKEND_FAIRLOAD") == "" {
		t.Skip("a load run of minutes; set MCP_BACKEND_FAIRLOAD=1 to run it")
	}
	for _, tc := range []struct {
		name    string
		greedy  string  // the greedy conversation's command
		seconds float64 // its length
		how     string  // how conversations are told apart
	}{
		{"greedy 1 s commands, Mcp-Session-Id per conversation", "sleep 1", 1, "session"},
		{"greedy 20 s commands, Mcp-Session-Id per conversation", "sleep 20", 20, "session"},
		{"greedy 1 s commands, only _meta openai/session, no session id", "sleep 1", 1, "meta"},
		{"greedy 20 s commands, only _meta openai/session, no session id", "sleep 20", 20, "meta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := proctest.FreePort(t)
			url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
			cmd := exec.Command(binary, "serve", "--config", writeConfig(t, fmt.Sprintf(`{"listen":"127.0.0.1:%d"}`, port)))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
			proctest.Eventually(t, "listening", func() bool {
				r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
				if err == nil {
					r.Body.Close()
				}
				return err == nil
			})
			const run = 25 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
			call := func(conv, command string) (string, time.Duration) {
				params := map[string]any{"name": "shell.exec", "arguments": map[string]any{"command": command, "timeoutMs": 60000}}
				req, _ := http.NewRequest(http.MethodPost, url, nil)
				if tc.how == "meta" {
					params["_meta"] = map[string]any{"openai/session": conv}
				} else {
					req.Header.Set("Mcp-Session-Id", conv)
				}
				body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
				req.Body = io.NopCloser(bytes.NewReader(body))
				req.ContentLength = int64(len(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					return "transport", time.Since(start)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var r struct {
					Result struct {
						IsError bool                       `json:"isError"`
						Meta    map[string]json.RawMessage `json:"_meta"`
					} `json:"result"`
				}
				if json.Unmarshal(b, &r) != nil {
					return "bad reply", time.Since(start)
				}
				if r.Result.IsError {
					var env struct {
						Error struct{ Code string } `json:"error"`
					}
					_ = json.Unmarshal(r.Result.Meta["mcp-backend/error"], &env)
					return env.Error.Code, time.Since(start)
				}
				return "ok", time.Since(start)
			}
			type tally struct {
				mu     sync.Mutex
				counts map[string]int
				waits  []time.Duration
			}
			tallies := map[string]*tally{}
			for _, n := range []string{"greedy", "polite-1", "polite-2", "polite-3"} {
				tallies[n] = &tally{counts: map[string]int{}}
			}
			note := func(conv, outcome string, d time.Duration) {
				tl := tallies[conv]
				tl.mu.Lock()
				tl.counts[outcome]++
				if outcome == "ok" {
					tl.waits = append(tl.waits, d)
				}
				tl.mu.Unlock()
			}
			var wg sync.WaitGroup
			for range 120 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						o, d := call("greedy", tc.greedy)
						if ctx.Err() == nil || o == "ok" {
							note("greedy", o, d)
						}
					}
				}()
			}
			for i := 1; i <= 3; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conv := fmt.Sprintf("polite-%d", i)
					for ctx.Err() == nil {
						o, d := call(conv, "sleep 0.2; echo ok")
						note(conv, o, d)
						time.Sleep(300 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			t.Logf("| conversation | calls | ok | OVERLOADED | other | median time to answer (ok) |")
			for _, n := range []string{"greedy", "polite-1", "polite-2", "polite-3"} {
				tl := tallies[n]
				calls := 0
				for _, c := range tl.counts {
					calls += c
				}
				slices.Sort(tl.waits)
				med := time.Duration(0)
				if len(tl.waits) > 0 {
					med = tl.waits[len(tl.waits)/2]
				}
				t.Logf("| %s | %d | %d | %d | %d | %s |", n, calls, tl.counts["ok"], tl.counts["OVERLOADED"], calls-tl.counts["ok"]-tl.counts["OVERLOADED"], med.Round(time.Millisecond))
				if n != "greedy" && float64(tl.counts["ok"]) < 0.95*float64(calls) {
					t.Errorf("%s: %d of %d ok, want >= 95 %%", n, tl.counts["ok"], calls)
				}
			}
			if want := 0.4 * 8 * run.Seconds() / tc.seconds; float64(tallies["greedy"].counts["ok"]) < want {
				t.Errorf("greedy completed %d, want >= %.0f", tallies["greedy"].counts["ok"], want)
			}
		})
	}
}
