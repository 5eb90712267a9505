package stress

import (
	"math"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/mcpwire"
)

func TestPlanFor(t *testing.T) {
	lim := mcpwire.Limits{MaxActive: 48, ReservedControl: 8, MaxNonControl: 40, MaxShell: 8, MaxQueue: 64, QueueWaitMs: 30000}
	sleep := 500 * time.Millisecond
	// 8 shells / 0.5 s = 16 shell calls/s; at half shell traffic: 32 req/s.
	tests := []struct {
		name       string
		p          Profile
		rate       float64
		start, end float64
		dur        time.Duration
		linear     bool
	}{
		{"overload is ten times capacity", Overload, 0, 320, 320, 20 * time.Second, false},
		{"overload with a rate", Overload, 50, 50, 50, 20 * time.Second, false},
		{"spike ramps from half to ten times", Spike, 0, 16, 320, 30 * time.Second, true},
		{"soak is below capacity", Soak, 0, 25.6, 25.6, 10 * time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := PlanFor(tc.p, lim, DefaultMix, sleep, 0, tc.rate)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(pl.StartRate-tc.start) > 1e-6 || math.Abs(pl.EndRate-tc.end) > 1e-6 || pl.Duration.D() != tc.dur {
				t.Fatalf("plan %+v, want %g..%g for %s", pl, tc.start, tc.end, tc.dur)
			}
			_, linear := pl.Pacer.(vegeta.LinearPacer)
			if linear != tc.linear {
				t.Fatalf("pacer %T, linear want %t", pl.Pacer, tc.linear)
			}
			if math.Abs(pl.CapacityRate-32) > 1e-6 {
				t.Fatalf("capacity %g, want 32", pl.CapacityRate)
			}
		})
	}
	// The derived rate is capped.
	big := lim
	big.MaxShell = 1000
	pl, err := PlanFor(Overload, big, DefaultMix, 10*time.Millisecond, time.Second, 0)
	if err != nil || pl.StartRate != MaxRate {
		t.Fatalf("uncapped rate %g (%v)", pl.StartRate, err)
	}
	for _, bad := range []struct {
		p    Profile
		rate float64
		dur  time.Duration
	}{{"flood", 0, 0}, {Overload, -1, 0}, {Overload, MaxRate + 1, 0}, {Overload, 0, -time.Second}} {
		if _, err := PlanFor(bad.p, lim, DefaultMix, sleep, bad.dur, bad.rate); err == nil {
			t.Errorf("PlanFor(%q, rate %g, %s) accepted", bad.p, bad.rate, bad.dur)
		}
	}
}
