package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/golden"
)

// TestSnapshotJSONGolden pins the bytes of the /metrics JSON (what the
// server's encoder writes for a snapshot): operators, the stress and mcpctl
// read these names, so a rename or a dropped field must show up here. The
// state is built so that most numbers differ, and a swapped field shows too.
func TestSnapshotJSONGolden(t *testing.T) {
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := New(Limits{MaxActive: 7, ReservedControl: 2, MaxShell: 3, MaxQueue: 2, QueueWait: 45 * time.Second}, WithClock(func() time.Time { return clock }))
	shell := hold(t, c, Shell, 3)
	normal := hold(t, c, Normal, 2) // the non-control share (5) is now full
	control := hold(t, c, Control, 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := enqueue(t, ctx, c, Normal)
	cancel()
	if r := get(t, first); !errors.Is(r.err, ErrCancelled) {
		t.Fatalf("cancelled waiter: %v", r.err)
	}
	keep, stop := context.WithCancel(context.Background())
	defer stop()
	queued := []<-chan result{enqueue(t, keep, c, Normal), enqueue(t, keep, c, Normal)}
	for i := 0; i < 3; i++ { // the queue (2) is full: rejected at once
		if _, err := c.Acquire(context.Background(), Normal); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("acquire with a full queue: %v, want ErrQueueFull", err)
		}
	}
	control[0].Release()

	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(c.Snapshot()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "metrics.golden.json", buf.Bytes())

	stop()
	for _, q := range queued {
		get(t, q)
	}
	releaseAll(shell)
	releaseAll(normal)
	assertIdle(t, c)
}
