package admission

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// The anchor is golang.org/x/sync/semaphore: FIFO with head-of-line
// blocking, no classes. Run both side by side:
//
//	go test -run '^$' -bench . -benchmem ./backend/admission/
func benchLimits() Limits {
	return Limits{MaxActive: 48, ReservedControl: 8, MaxShell: 8, MaxQueue: 64, QueueWait: 30 * time.Second}
}

func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("admission/uncontended", func(b *testing.B) {
		c := New(benchLimits())
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
