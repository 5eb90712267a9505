package admission

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/backend/caller"

	"golang.org/x/sync/semaphore"
)

// The anchor is golang.org/x/sync/semaphore: FIFO with head-of-line
// blocking, no classes. Run both side by side:
//
//	go test -run '^$' -bench . -benchmem ./backend/admission/
func benchLimits() Limits {
	return Limits{MaxActive: 48, ReservedControl: 8, MaxShell: 8, MaxQueue: 64, QueueWait: 30 * time.Second}
}

// cpuTime is the process's CPU time (user and system) so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op, the CPU time the process spent per operation
// from here to the benchmark's end: on a shared machine, wall time per
// operation moves with the load, CPU time much less.
func reportCPU(b *testing.B) {
	start := cpuTime(b)
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		}
	})
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("admission/uncontended", func(b *testing.B) {
		c := New(benchLimits())
		reportCPU(b)
		for b.Loop() {
			p, err := c.Acquire(ctx, Normal)
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	})
	b.Run("semaphore/uncontended", func(b *testing.B) {
		s := semaphore.NewWeighted(40)
		reportCPU(b)
		for b.Loop() {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			s.Release(1)
		}
	})
	b.Run("admission/16goroutines", func(b *testing.B) {
		c := New(benchLimits())
		b.SetParallelism(16) // 16 x GOMAXPROCS goroutines; GOMAXPROCS is 2 here
		reportCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := c.Acquire(ctx, Normal)
				if err != nil {
					b.Error(err)
					return
				}
				p.Release()
			}
		})
	})
	b.Run("semaphore/16goroutines", func(b *testing.B) {
		s := semaphore.NewWeighted(40)
		b.SetParallelism(16)
		reportCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Acquire(ctx, 1); err != nil {
					b.Error(err)
					return
				}
				s.Release(1)
			}
		})
	})
}

// BenchmarkAcquireReleaseFlows is the path of a call with fair share: its
// raw ids (a session id) resolved to its flow, then Acquire and Release,
// the calls spread over 1, 100 or 10,000 conversations (the table holds
// 1024; beyond, conversations share buckets). Compare with
// BenchmarkAcquireRelease/admission (the anonymous flow, no resolution).
func BenchmarkAcquireReleaseFlows(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 100, 10000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("session-%032d", i)
		}
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			lim := benchLimits()
			lim.FlowReserve = 1
			c := New(lim)
			reportCPU(b)
			i := 0
			for b.Loop() {
				cw := caller.Resolve(caller.Claims{SessionID: ids[i%n]})
				i++
				p, err := c.AcquireFlow(ctx, Normal, Flow{Principal: cw.Principal.Key(), Conversation: cw.Conversation})
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		})
		b.Run(fmt.Sprintf("flows=%d/16goroutines", n), func(b *testing.B) {
			lim := benchLimits()
			lim.FlowReserve = 1
			c := New(lim)
			reportCPU(b)
			var next atomic.Int64
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					cw := caller.Resolve(caller.Claims{SessionID: ids[int(next.Add(1))%n]})
					p, err := c.AcquireFlow(ctx, Normal, Flow{Principal: cw.Principal.Key(), Conversation: cw.Conversation})
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
		})
		// The same without the resolution (its hashing allocates): what
		// admission itself costs and allocates per call.
		flows := make([]Flow, n)
		for i, id := range ids {
			cw := caller.Resolve(caller.Claims{SessionID: id})
			flows[i] = Flow{Principal: cw.Principal.Key(), Conversation: cw.Conversation}
		}
		b.Run(fmt.Sprintf("flows=%d/16goroutines-preresolved", n), func(b *testing.B) {
			lim := benchLimits()
			lim.FlowReserve = 1
			c := New(lim)
			reportCPU(b)
			var next atomic.Int64
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := c.AcquireFlow(ctx, Normal, flows[int(next.Add(1))%n])
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
		})
	}
}
