package admission

import (
	"context"
	"testing"

	"github.com/overdeck/mcp-backend/internal/proctest"
)

// TestRealClockReadingGoesStale: on the real clock a reading serves the
// decisions of a tick and then goes stale, and the next decision reads
// the clock again: time moves on for the dispatcher even when nothing
// else happens meanwhile.
func TestRealClockReadingGoesStale(t *testing.T) {
	c := New(small())
	if !c.coarse {
		t.Fatal("the real clock is not read once a tick")
	}
	reading := func() instant {
		t.Helper()
		p, err := c.Acquire(context.Background(), Normal)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last
	}
	first := reading()
	proctest.Eventually(t, "the reading goes stale", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.fresh
	})
	if second := reading(); second <= first {
		t.Fatalf("after the reading went stale, decisions at %v, not after %v", second, first)
	}
	assertIdle(t, c)
}

// TestTestClocksAreReadEveryTime: a clock given to the controller is read
// at every decision, which is what keeps shares exact on a fake clock.
func TestTestClocksAreReadEveryTime(t *testing.T) {
	c, _ := fairController(t, small())
	if c.coarse {
		t.Fatal("a test clock is read once a tick")
	}
}
