package jsoncheck

import "testing"

func TestDurations(t *testing.T) {
	tests := []struct {
		name, doc string
		bad       int
	}{
		{"nanoseconds under duration", `{"plan":{"duration":3000000000}}`, 1},
		{"a Go duration string", `{"shellSleep":"500ms"}`, 1},
		{"milliseconds", `{"plan":{"durationMs":3000},"p99Ms":1.5,"timings":[{"step":"x","durationMs":2}]}`, 0},
		{"an Ms key that is no number", `{"tookMs":"2s"}`, 1},
		{"a time stamp under deadline", `{"deadline":"2026-01-01T00:00:00Z"}`, 0},
		{"counters are not durations", `{"maxActive":48,"timedOut":3,"queued":1}`, 0},
	}
	for _, tc := range tests {
		bad, err := Durations([]byte(tc.doc))
		if err != nil || len(bad) != tc.bad {
			t.Errorf("%s: %v %v, want %d", tc.name, bad, err, tc.bad)
		}
	}
}
