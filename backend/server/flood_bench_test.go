package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/internal/proctest"
)

// BenchmarkRefusalFlood: 1,000 conversations flood shell.exec through the
// real handler, retrying at once: they fill the shell slots and the queue,
// and everything beyond is refused OVERLOADED. Beside them 3 polite
// conversations read a small file one call after another (normal work,
// which has free slots): each call still passes the admission controller
// the flood keeps busy. The flood comes as 1,000 conversations of one
// principal, or of 1,000 principals (subjects asserted in _meta). Reported:
// the flood's refusals per second, the polite calls' latency (mean and 99th
// percentile), and the process's CPU time per call answered (refusals and
// polite calls; client and server are one process): on a machine shared
// with other work the CPU time is the steadier figure. One op is one
// polite call.
//
//	go test -run '^$' -bench RefusalFlood -benchtime 600x ./backend/server/
func BenchmarkRefusalFlood(b *testing.B) {
	b.Run("conversations", func(b *testing.B) { refusalFlood(b, false) })
	b.Run("principals", func(b *testing.B) { refusalFlood(b, true) })
}

func refusalFlood(b *testing.B, principals bool) {
	const conversations, flooders, polite = 1000, 96, 3
	bk := startBackend(b, func(c *config.Config) {
		c.Concurrency.MaxShell, c.Concurrency.MaxQueue = 4, 64
		c.Concurrency.QueueWaitMs = 600000 // the queued flood stays queued
	})
	path := filepath.Join(b.TempDir(), "small")
	if err := os.WriteFile(path, []byte("polite\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flooders + polite, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()
	call := func(ctx context.Context, subject, conv, tool string, args map[string]any) (string, error) {
		meta := map[string]any{"openai/session": conv}
		if subject != "" {
			meta["openai/subject"] = subject
		}
		params := map[string]any{"name": tool, "arguments": args, "_meta": meta}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":%s}`, mustJSON(params))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, bk.url+"/mcp", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("HTTP %d", resp.StatusCode), nil
		}
		return parseReplyQuiet(out), nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	var refused, next atomic.Int64
	var wg sync.WaitGroup
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) % conversations
				conv, subject := fmt.Sprintf("flood-%d", i), ""
				if principals {
					subject = fmt.Sprintf("flooder-%d", i)
				}
				if code, err := call(ctx, subject, conv, "shell.exec", map[string]any{"command": "sleep 600"}); err == nil && code == "OVERLOADED" {
					refused.Add(1)
				}
			}
		}()
	}
	defer func() {
		cancel()
		bk.srv.Close() // ends the flood's running and queued calls
		wg.Wait()
	}()
	proctest.Eventually(b, "the flood fills the shell slots and the queue", func() bool {
		m := bk.metrics(b)
		return m.Active.Shell == 4 && m.Queued.Total == 64 && refused.Load() > 0
	})

	lat := make([][]time.Duration, polite)
	var pwg sync.WaitGroup
	b.ResetTimer()
	start, refusedBefore, cpuBefore := time.Now(), refused.Load(), cpuTime()
	for i := range polite {
		n := b.N / polite
		if i < b.N%polite {
			n++
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for range n {
				t0 := time.Now()
				// Beside 1,000 flooding principals each polite caller is a
				// principal of its own: the flood's remembered demand
				// leaves one principal's share well under a slot.
				subject := ""
				if principals {
					subject = fmt.Sprintf("polite-%d", i)
				}
				code, err := call(context.Background(), subject, fmt.Sprintf("polite-%d", i), "file.read", map[string]any{"path": path})
				if err != nil || code != "" {
					b.Errorf("polite call: %q %v", code, err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	pwg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpuBefore
	b.StopTimer()
	n := refused.Load() - refusedBefore
	all := slices.Concat(lat...)
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	if len(all) > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "refusals/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(n+int64(len(all))), "cpu-µs/call")
		b.ReportMetric(float64(sum.Microseconds())/float64(len(all)), "polite-µs/call")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "polite-p99-µs")
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
