package stress

import (
	"slices"
	"sort"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// CallRecord is one tools/call of the attack, as the stress saw it.
type CallRecord struct {
	ID      uint64        `json:"id"`
	Tool    string        `json:"tool"`
	Class   mcpwire.Class `json:"class"`
	Outcome Outcome       `json:"outcome"`
	Code    string        `json:"code,omitempty"`
	Detail  string        `json:"detail,omitempty"`
	Start   time.Time     `json:"start"`
	// Span is what a successful shell.exec reported about itself.
	Span *Span `json:"span,omitempty"`
	// SpanErr says why an ok shell.exec reported no usable span.
	SpanErr string `json:"spanError,omitempty"`
	// Latency is last: its ...Ms field has always closed the object.
	Latency millis.Duration `json:"latencyMs"`
}

// Interval is a half-open time interval in ns.
type Interval struct{ Start, End int64 }

// MaxOverlap returns the largest number of intervals that contain a common
// instant. An interval that ends exactly when another starts does not
// overlap it: a slot handed over is not two slots.
func MaxOverlap(iv []Interval) int {
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(iv))
	for _, v := range iv {
		if v.End <= v.Start {
			continue
		}
		edges = append(edges, edge{v.Start, +1}, edge{v.End, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta // ends before starts
	})
	cur, best := 0, 0
	for _, e := range edges {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// ShellStats is the independent view of shell concurrency.
type ShellStats struct {
	// Calls is the number of shell.exec calls sent.
	Calls int `json:"calls"`
	// Measured counts ok shell.exec calls that reported their span.
	Measured int `json:"measured"`
	// Unmeasured counts ok shell.exec calls whose span was missing or
	// unreadable; FirstUnmeasured says why for the first.
	Unmeasured      int    `json:"unmeasured"`
	FirstUnmeasured string `json:"firstUnmeasured,omitempty"`
	// MeasuredPeak is the most commands that reported running at once.
	MeasuredPeak int `json:"measuredPeak"`
	// OfferedPeak is the most shell.exec requests in flight at once from
	// the client's side: the shell load offered.
	OfferedPeak int `json:"offeredPeak"`
}

// ShellStatsOf computes the shell statistics of the calls.
func ShellStatsOf(calls []CallRecord) ShellStats {
	var s ShellStats
	var spans, flight []Interval
	for _, c := range calls {
		if c.Class != mcpwire.ClassShell {
			continue
		}
		s.Calls++
		start := c.Start.UnixNano()
		flight = append(flight, Interval{start, start + int64(c.Latency)})
		if c.Outcome != OutcomeOK {
			continue
		}
		if c.Span == nil {
			s.Unmeasured++
			if s.FirstUnmeasured == "" {
				s.FirstUnmeasured = c.SpanErr
			}
			continue
		}
		s.Measured++
		spans = append(spans, Interval{c.Span.Start, c.Span.End})
	}
	s.MeasuredPeak = MaxOverlap(spans)
	s.OfferedPeak = MaxOverlap(flight)
	return s
}

// Latency is a latency summary.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P95Ms float64 `json:"p95Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

// Summarize returns the nearest-rank quantiles of ds.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Latency{
		Count: len(s),
		P50Ms: ms(Quantile(s, 0.50)),
		P95Ms: ms(Quantile(s, 0.95)),
		P99Ms: ms(Quantile(s, 0.99)),
		MaxMs: ms(s[len(s)-1]),
	}
}

// Quantile returns the nearest-rank q-quantile of sorted durations.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms is d as a ...Ms number, rounded as millis.Duration writes it.
func ms(d time.Duration) float64 { return millis.Duration(d).Ms() }

// CallStats are outcome counts and latencies of the attack's calls.
type CallStats struct {
	Total     int                               `json:"total"`
	Counts    map[mcpwire.Class]map[Outcome]int `json:"counts"`
	ByClass   map[mcpwire.Class]Latency         `json:"byClass"`
	ByOutcome map[Outcome]Latency               `json:"byOutcome"`
	Examples  map[Outcome]string                `json:"examples,omitempty"` // first detail of each unacceptable outcome
	latencies map[mcpwire.Class][]time.Duration
	byBoth    map[mcpwire.Class]map[Outcome][]time.Duration
}

// CallStatsOf aggregates the calls.
func CallStatsOf(calls []CallRecord) CallStats {
	s := CallStats{
		Total:     len(calls),
		Counts:    map[mcpwire.Class]map[Outcome]int{},
		ByClass:   map[mcpwire.Class]Latency{},
		ByOutcome: map[Outcome]Latency{},
		Examples:  map[Outcome]string{},
		latencies: map[mcpwire.Class][]time.Duration{},
		byBoth:    map[mcpwire.Class]map[Outcome][]time.Duration{},
	}
	byOutcome := map[Outcome][]time.Duration{}
	for _, c := range calls {
		if s.Counts[c.Class] == nil {
			s.Counts[c.Class] = map[Outcome]int{}
			s.byBoth[c.Class] = map[Outcome][]time.Duration{}
		}
		s.Counts[c.Class][c.Outcome]++
		s.latencies[c.Class] = append(s.latencies[c.Class], c.Latency.D())
		s.byBoth[c.Class][c.Outcome] = append(s.byBoth[c.Class][c.Outcome], c.Latency.D())
		byOutcome[c.Outcome] = append(byOutcome[c.Outcome], c.Latency.D())
		if !c.Outcome.Acceptable() && s.Examples[c.Outcome] == "" {
			s.Examples[c.Outcome] = c.Tool + ": " + c.Detail
		}
	}
	for c, ds := range s.latencies {
		s.ByClass[c] = Summarize(ds)
	}
	for o, ds := range byOutcome {
		s.ByOutcome[o] = Summarize(ds)
	}
	return s
}

// Count returns the number of calls of class c with outcome o; an empty
// class means every class.
func (s CallStats) Count(c mcpwire.Class, o Outcome) int {
	if c != "" {
		return s.Counts[c][o]
	}
	n := 0
	for _, m := range s.Counts {
		n += m[o]
	}
	return n
}

// ClassTotal is the number of calls of class c.
func (s CallStats) ClassTotal(c mcpwire.Class) int {
	n := 0
	for _, v := range s.Counts[c] {
		n += v
	}
	return n
}

// Of summarises the latencies of class c with outcome o.
func (s CallStats) Of(c mcpwire.Class, o Outcome) Latency { return Summarize(s.byBoth[c][o]) }
