package stress

import (
	"slices"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
)

var testLimits = mcpwire.Limits{MaxActive: 12, ReservedControl: 2, MaxNonControl: 10, MaxShell: 4, MaxQueue: 8, QueueWaitMs: 2000}

// goodFacts is a run that passes every check: 4 shells ran at once out of
// 6 in flight, 2 were shed, control calls were fast, the unit was stable.
func goodFacts() Facts {
	t0 := time.Unix(1000, 0)
	var calls []CallRecord
	id := uint64(0)
	call := func(class mcpwire.Class, tool string, o Outcome, lat time.Duration, span *Span) {
		id++
		calls = append(calls, CallRecord{ID: id, Tool: tool, Class: class, Outcome: o, Start: t0, Latency: millis.Duration(lat), Span: span})
	}
	for i := range 4 {
		call(mcpwire.ClassShell, "shell.exec", OutcomeOK, time.Second, &Span{int64(100 + i), int64(500 + i)})
	}
	call(mcpwire.ClassShell, "shell.exec", OutcomeOverloaded, time.Millisecond, nil)
	call(mcpwire.ClassShell, "shell.exec", OutcomeOverloaded, time.Millisecond, nil)
	for range 3 {
		call(mcpwire.ClassNormal, "file.list", OutcomeOK, 2*time.Millisecond, nil)
	}
	for range 100 {
		call(mcpwire.ClassControl, "system.info", OutcomeOK, 3*time.Millisecond, nil)
	}
	before := mcpwire.Metrics{Limits: testLimits, Counters: mcpwire.Counters{Accepted: 10, Completed: 10, Rejected: 1}}
	after := mcpwire.Metrics{
		Limits:   testLimits,
		Peak:     mcpwire.Peak{Active: 6, NonControl: 5, Shell: 4, Queued: 3},
		Counters: mcpwire.Counters{Accepted: 10 + 107, Completed: 10 + 107, Rejected: 1 + 1, TimedOut: 1},
	}
	unit := &UnitSeries{Name: "mcp-backend-canary.service"}
	for i := range 9 {
		unit.Samples = append(unit.Samples, UnitSample{MainPID: 42, InvocationID: "abc", NRestarts: 0, MemoryBytes: uint64(50+i) << 20})
	}
	return Facts{
		Limits: testLimits, Before: before, After: after, Settled: true, Calls: calls,
		Series:     MetricsSeries{Samples: 30, MaxActive: 6, MaxNonControl: 5, MaxShell: 4, MaxQueued: 3},
		Health:     HealthSeries{URL: "http://127.0.0.1:1/healthz", Samples: 30},
		Production: &HealthSeries{URL: "http://127.0.0.1:2/healthz", Samples: 30},
		Unit:       unit,
		Faults: &FaultFacts{
			QueuedDisconnect:  DisconnectFacts{Sent: 3, Seen: 3, CancelledDelta: 3, Released: true},
			RunningDisconnect: DisconnectFacts{Sent: 4, Seen: 4, ProcsSeen: 4, Released: true},
			Grandchildren:     ProcFacts{Outcome: OutcomeOK, TimedOut: true, ProcsSeen: 2},
			Floods:            []FloodFacts{{Name: "nul", Status: 200, Outcome: OutcomeOK, BodyBytes: 5 << 20, OutputLimited: true}, {Name: "text", Status: 200, Outcome: OutcomeToolError, Code: "OUTPUT_LIMIT", BodyBytes: 100}},
			Oversized:         OversizedFacts{BodyBytes: 32 << 20, Status: 413, HealthyAfter: true, CallOKAfter: true},
			SlowClient:        SlowFacts{Status: 200, Outcome: OutcomeOK, BodyBytes: 2 << 20},
		},
	}
}

func failing(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if c.Status == Fail {
			out = append(out, c.Name)
		}
	}
	slices.Sort(out)
	return out
}

func TestAssess(t *testing.T) {
	th := DefaultThresholds()
	th.MemoryHigh = 1 << 30
	tests := []struct {
		name   string
		mutate func(f *Facts)
		fail   []string
	}{
		{"good run passes", func(*Facts) {}, nil},
		{"metrics show too many shells", func(f *Facts) { f.Series.MaxShell = 5 }, []string{"shell.bound.metrics"}},
		{"commands overlap more than maxShell while metrics claim the limit", func(f *Facts) {
			f.Calls = append(f.Calls, CallRecord{ID: 999, Tool: "shell.exec", Class: mcpwire.ClassShell, Outcome: OutcomeOK, Latency: millis.Duration(time.Second), Span: &Span{200, 300}})
			f.After.Counters.Accepted++
			f.After.Counters.Completed++
		}, []string{"shell.bound.measured", "shell.metrics.honest"}},
		{"ok shell without a span cannot be measured", func(f *Facts) {
			f.Calls = append(f.Calls, CallRecord{ID: 999, Tool: "shell.exec", Class: mcpwire.ClassShell, Outcome: OutcomeOK, SpanErr: "stdout lacks the S/E time lines"})
			f.After.Counters.Accepted++
			f.After.Counters.Completed++
		}, []string{"shell.bound.measured"}},
		{"serializer never reaches maxShell", func(f *Facts) {
			for i := range 4 {
				f.Calls[i].Span = &Span{int64(100 * i), int64(100*i + 50)}
			}
			f.Series.MaxShell, f.After.Peak.Shell = 1, 1
		}, []string{"shell.reaches.limit"}},
		{"active above maxActive", func(f *Facts) { f.After.Peak.Active = 13 }, []string{"active.bound"}},
		{"nonControl above its limit", func(f *Facts) { f.Series.MaxNonControl = 11 }, []string{"nonControl.bound"}},
		{"queue above maxQueue", func(f *Facts) { f.After.Peak.Queued = 9 }, []string{"queued.bound"}},
		{"HTTP 500 under load", func(f *Facts) {
			f.Calls[4].Outcome, f.Calls[4].Detail = OutcomeHTTPError, "HTTP 500"
		}, []string{"failures.structured"}},
		{"transport error", func(f *Facts) {
			f.Calls[4].Outcome = OutcomeTransport
		}, []string{"failures.structured"}},
		{"another tool error code", func(f *Facts) {
			f.Calls[4].Outcome, f.Calls[4].Code = OutcomeToolError, "INTERNAL"
		}, []string{"counters.balance", "failures.structured"}},
		{"control calls fail", func(f *Facts) {
			for i := 10; i < 12; i++ {
				f.Calls[i].Outcome = OutcomeOverloaded
			}
			f.After.Counters.Accepted -= 2
			f.After.Counters.Completed -= 2
			f.After.Counters.Rejected += 2
		}, []string{"control.success"}},
		{"control calls slow", func(f *Facts) {
			for i := 10; i < 20; i++ {
				f.Calls[i].Latency = millis.Duration(2 * time.Second)
			}
		}, []string{"control.p99"}},
		{"healthz failed once", func(f *Facts) { f.Health.Failures, f.Health.FirstFailure = 1, "HTTP 503" }, []string{"healthz"}},
		{"healthz never sampled", func(f *Facts) { f.Health.Samples = 0 }, []string{"healthz"}},
		{"production hurt", func(f *Facts) { f.Production.Failures = 2 }, []string{"production.healthz"}},
		{"metrics unavailable", func(f *Facts) { f.Series.Errors = 1 }, []string{"metrics.available"}},
		{"unit restarted", func(f *Facts) {
			f.Unit.Samples[5].MainPID, f.Unit.Samples[5].InvocationID = 43, "def"
		}, []string{"unit.stable"}},
		{"unit restart counted", func(f *Facts) { f.Unit.Samples[8].NRestarts = 1 }, []string{"unit.stable"}},
		{"unit never sampled", func(f *Facts) { f.Unit.Samples = nil }, []string{"unit.memory", "unit.stable"}},
		{"memory grows without bound", func(f *Facts) {
			for i := 6; i < 9; i++ {
				f.Unit.Samples[i].MemoryBytes = 200 << 20
			}
		}, []string{"unit.memory"}},
		{"memory raised by the faults is not growth", func(f *Facts) {
			f.FaultsFrom = time.Unix(2000, 0)
			for i := range f.Unit.Samples {
				f.Unit.Samples[i].At = time.Unix(int64(1000+200*i), 0)
			}
			for i := 6; i < 9; i++ {
				f.Unit.Samples[i].MemoryBytes = 400 << 20
			}
		}, nil},
		{"memory raised by the faults above MemoryHigh", func(f *Facts) {
			f.FaultsFrom = time.Unix(2000, 0)
			for i := range f.Unit.Samples {
				f.Unit.Samples[i].At = time.Unix(int64(1000+200*i), 0)
			}
			f.Unit.Samples[8].MemoryBytes = 2 << 30
		}, []string{"unit.memory"}},
		{"cgroup above MemoryHigh", func(f *Facts) { f.Unit.Samples[4].CgroupBytes = 1 << 30 }, []string{"unit.memory"}},
		{"memory above MemoryHigh", func(f *Facts) {
			for i := range f.Unit.Samples {
				f.Unit.Samples[i].MemoryBytes = 2 << 30
			}
		}, []string{"unit.memory"}},
		{"never settles", func(f *Facts) { f.Settled, f.After.Active.Total = false, 1 }, []string{"settle.idle"}},
		{"slot leaked", func(f *Facts) { f.After.Counters.Completed-- }, []string{"counters.balance"}},
		{"admission saw more calls than sent", func(f *Facts) { f.After.Counters.Accepted += 5; f.After.Counters.Completed += 5 }, []string{"counters.balance"}},
		{"OVERLOADED not counted as shed", func(f *Facts) { f.After.Counters.TimedOut--; f.After.Counters.Accepted++; f.After.Counters.Completed++ }, []string{"counters.balance"}},
		{"queued disconnect not counted", func(f *Facts) { f.Faults.QueuedDisconnect.CancelledDelta = 0 }, []string{"fault.disconnect.queued"}},
		{"queued disconnect never queued", func(f *Facts) { f.Faults.QueuedDisconnect.Seen = 1 }, []string{"fault.disconnect.queued"}},
		{"running disconnect leaves processes", func(f *Facts) { f.Faults.RunningDisconnect.ProcsLeft = 4 }, []string{"fault.disconnect.running"}},
		{"running disconnect keeps slots", func(f *Facts) { f.Faults.RunningDisconnect.Released = false }, []string{"fault.disconnect.running"}},
		{"grandchildren survive", func(f *Facts) { f.Faults.Grandchildren.ProcsLeft = 2 }, []string{"fault.grandchildren"}},
		{"grandchildren never seen", func(f *Facts) { f.Faults.Grandchildren.ProcsSeen = 0 }, []string{"fault.grandchildren"}},
		{"flood over budget", func(f *Facts) { f.Faults.Floods[0].BodyBytes = 7 << 20 }, []string{"fault.flood"}},
		{"flood not flagged", func(f *Facts) { f.Faults.Floods[0].OutputLimited = false }, []string{"fault.flood"}},
		{"oversized accepted", func(f *Facts) { f.Faults.Oversized.Status = 200 }, []string{"fault.oversized"}},
		{"oversized killed the backend", func(f *Facts) { f.Faults.Oversized.HealthyAfter = false }, []string{"fault.oversized"}},
		{"slow client broken", func(f *Facts) { f.Faults.SlowClient.Err = "read body: unexpected EOF" }, []string{"fault.slow.client"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := goodFacts()
			tc.mutate(&f)
			checks := Assess(f, th)
			if got := failing(checks); !slices.Equal(got, tc.fail) {
				for _, c := range checks {
					t.Logf("%-26s %s %s", c.Name, c.Status, c.Detail)
				}
				t.Fatalf("failing checks %v, want %v", got, tc.fail)
			}
			if Passed(checks) != (len(tc.fail) == 0) {
				t.Fatalf("Passed = %t with failing %v", Passed(checks), tc.fail)
			}
		})
	}
}

func TestAssessSkips(t *testing.T) {
	f := goodFacts()
	f.Production, f.Unit, f.Faults = nil, nil, nil
	// Offered shell load never above maxShell: the ceiling check has no premise.
	var calls []CallRecord
	for _, c := range f.Calls {
		if c.Class != mcpwire.ClassShell || c.Outcome != OutcomeOK {
			calls = append(calls, c)
		}
	}
	f.Calls = calls
	f.After.Counters.Accepted, f.After.Counters.Completed = 10+103, 10+103
	checks := Assess(f, DefaultThresholds())
	skipped := map[string]bool{}
	for _, c := range checks {
		if c.Status == Skip {
			skipped[c.Name] = true
		}
		if c.Status == Fail {
			t.Errorf("%s failed: %s", c.Name, c.Detail)
		}
		if len(c.Name) > 6 && c.Name[:6] == "fault." {
			t.Errorf("fault check %s without faults", c.Name)
		}
	}
	for _, n := range []string{"production.healthz", "unit.stable", "unit.memory", "shell.reaches.limit"} {
		if !skipped[n] {
			t.Errorf("%s not skipped", n)
		}
	}
}
