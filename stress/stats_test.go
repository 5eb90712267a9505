package stress

import (
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

func TestMaxOverlap(t *testing.T) {
	tests := []struct {
		name string
		iv   []Interval
		want int
	}{
		{"none", nil, 0},
		{"one", []Interval{{0, 10}}, 1},
		{"disjoint", []Interval{{0, 10}, {20, 30}}, 1},
		{"handover is not overlap", []Interval{{0, 10}, {10, 20}, {20, 30}}, 1},
		{"nested", []Interval{{0, 100}, {10, 20}, {15, 30}}, 3},
		{"staggered", []Interval{{0, 10}, {5, 15}, {9, 20}, {12, 25}}, 3},
		{"empty intervals ignored", []Interval{{5, 5}, {7, 3}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MaxOverlap(tc.iv); got != tc.want {
				t.Fatalf("MaxOverlap = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Quantile(ds, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if l := Summarize(nil); l.Count != 0 {
		t.Fatalf("Summarize(nil) = %+v", l)
	}
}

func TestShellStats(t *testing.T) {
	base := time.Unix(1000, 0)
	span := func(a, b int64) *Span { return &Span{a, b} }
	calls := []CallRecord{
		{Class: mcpwire.ClassShell, Outcome: OutcomeOK, Start: base, Latency: 100, Span: span(10, 50)},
		{Class: mcpwire.ClassShell, Outcome: OutcomeOK, Start: base, Latency: 100, Span: span(20, 60)},
		{Class: mcpwire.ClassShell, Outcome: OutcomeOK, Start: base, Latency: 100, SpanErr: "no span"},
		{Class: mcpwire.ClassShell, Outcome: OutcomeOverloaded, Start: base, Latency: 100},
		{Class: mcpwire.ClassControl, Outcome: OutcomeOK, Start: base, Latency: 100},
	}
	s := ShellStatsOf(calls)
	want := ShellStats{Calls: 4, Measured: 2, Unmeasured: 1, FirstUnmeasured: "no span", MeasuredPeak: 2, OfferedPeak: 4}
	if s != want {
		t.Fatalf("ShellStatsOf = %+v, want %+v", s, want)
	}
}
