package stress

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Status is the result of one check.
type Status string

// Check statuses. SKIP is only for checks whose premise did not occur (no
// unit given, no production configured, shell load never above the limit).
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Check is one assertion with what was measured.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Thresholds are the tunable limits of the assertions.
type Thresholds struct {
	// ControlSuccess is the fraction of control calls that must succeed.
	ControlSuccess float64 `json:"controlSuccess"`
	// MemoryGrowth is how much the last third's peak memory may exceed the
	// first third's (0.5 = 50%), plus MemorySlack bytes.
	MemoryGrowth float64 `json:"memoryGrowth"`
	MemorySlack  uint64  `json:"memorySlack"`
	// MemoryHigh is the unit's MemoryHigh; 0 when unknown or infinite.
	MemoryHigh uint64 `json:"memoryHigh"`
	// ResponseBytes is the backend's response budget (limits.responseBytes).
	ResponseBytes int64 `json:"responseBytes"`
	// ControlP99 bounds the p99 latency of control calls. It is last: its
	// ...Ms field has always closed the object.
	ControlP99 millis.Duration `json:"controlP99Ms"`
}

// DefaultThresholds are generous: machines are noisy.
func DefaultThresholds() Thresholds {
	return Thresholds{
		ControlP99:     millis.Duration(time.Second),
		ControlSuccess: 0.99,
		MemoryGrowth:   0.5,
		MemorySlack:    32 << 20,
		ResponseBytes:  6 << 20,
	}
}

// Facts is everything a run observed; Assess judges it.
type Facts struct {
	Limits mcpwire.Limits `json:"limits"`
	// Before is /metrics just before the attack, After once the target went
	// idle again (or the last sample when it never did: Settled false).
	Before  mcpwire.Metrics `json:"before"`
	After   mcpwire.Metrics `json:"after"`
	Settled bool            `json:"settled"`

	Calls []CallRecord `json:"-"`

	Series     MetricsSeries `json:"series"`
	Health     HealthSeries  `json:"health"`
	Production *HealthSeries `json:"production,omitempty"`
	Unit       *UnitSeries   `json:"unit,omitempty"`

	Faults *FaultFacts `json:"faults,omitempty"`
	// FaultsFrom is when the fault injections began (zero without faults).
	// Floods may raise memory briefly and legitimately: growth is judged on
	// the attack's samples only, MemoryHigh on all of them.
	FaultsFrom time.Time `json:"faultsFrom,omitzero"`
}

// FaultFacts are the raw observations of the fault injections.
type FaultFacts struct {
	// ToolCalls is the number of tools/call requests the faults sent that
	// reached the server; Overloaded how many of the read replies were
	// OVERLOADED (the fault phase runs on an idle target: expected none).
	ToolCalls  int `json:"toolCalls"`
	Overloaded int `json:"overloaded"`

	QueuedDisconnect  DisconnectFacts `json:"queuedDisconnect"`
	RunningDisconnect DisconnectFacts `json:"runningDisconnect"`
	Grandchildren     ProcFacts       `json:"grandchildren"`
	Floods            []FloodFacts    `json:"floods"`
	Oversized         OversizedFacts  `json:"oversized"`
	SlowClient        SlowFacts       `json:"slowClient"`
}

// DisconnectFacts: clients that went away while queued or while running.
type DisconnectFacts struct {
	Sent int `json:"sent"`
	// Seen is the most queued (or shell-active) operations observed before
	// the clients left: proof they were where the fault needs them.
	Seen int `json:"seen"`
	// CancelledDelta is the rise of counters.cancelled.
	CancelledDelta int64 `json:"cancelledDelta"`
	// ProcsSeen/ProcsLeft count the commands' marked processes while
	// running and after the clients left.
	ProcsSeen int `json:"procsSeen"`
	ProcsLeft int `json:"procsLeft"`
	// Released says the target returned to (queued or active) zero.
	Released bool   `json:"released"`
	Err      string `json:"error,omitempty"`
}

// ProcFacts: a command that spawned grandchildren and timed out.
type ProcFacts struct {
	Outcome   Outcome `json:"outcome"`
	Code      string  `json:"code,omitempty"`
	TimedOut  bool    `json:"timedOut"`
	ProcsSeen int     `json:"procsSeen"`
	ProcsLeft int     `json:"procsLeft"`
	Err       string  `json:"error,omitempty"`
}

// FloodFacts: a command whose output exceeds the limits.
type FloodFacts struct {
	Name          string  `json:"name"`
	Status        int     `json:"status"`
	Outcome       Outcome `json:"outcome"`
	Code          string  `json:"code,omitempty"`
	BodyBytes     int64   `json:"bodyBytes"`
	OutputLimited bool    `json:"outputLimited"`
	Err           string  `json:"error,omitempty"`
}

// OversizedFacts: a request body far above any sane limit.
type OversizedFacts struct {
	BodyBytes    int64  `json:"bodyBytes"`
	Status       int    `json:"status"`
	HealthyAfter bool   `json:"healthyAfter"`
	CallOKAfter  bool   `json:"callOKAfter"`
	Err          string `json:"error,omitempty"`
}

// SlowFacts: a client that reads its response slowly.
type SlowFacts struct {
	Status    int     `json:"status"`
	Outcome   Outcome `json:"outcome"`
	BodyBytes int64   `json:"bodyBytes"`
	Err       string  `json:"error,omitempty"`
	// Took is last: its ...Ms field has always closed the object.
	Took millis.Duration `json:"tookMs"`
}

// Passed reports whether no check failed.
func Passed(checks []Check) bool {
	return !slices.ContainsFunc(checks, func(c Check) bool { return c.Status == Fail })
}

// Assess judges the facts. It is pure: the same facts give the same checks.
func Assess(f Facts, th Thresholds) []Check {
	var out []Check
	add := func(name string, ok bool, format string, a ...any) {
		st := Pass
		if !ok {
			st = Fail
		}
		out = append(out, Check{Name: name, Status: st, Detail: fmt.Sprintf(format, a...)})
	}
	skip := func(name, format string, a ...any) {
		out = append(out, Check{Name: name, Status: Skip, Detail: fmt.Sprintf(format, a...)})
	}
	L := f.Limits
	calls := CallStatsOf(f.Calls)
	shell := ShellStatsOf(f.Calls)

	// Bounds, from the server's own numbers: lifetime peaks and samples.
	metricsShell := max(int(f.After.Peak.Shell), f.Series.MaxShell)
	add("shell.bound.metrics", metricsShell <= L.MaxShell,
		"peak shell %d (sampled max %d) <= maxShell %d", f.After.Peak.Shell, f.Series.MaxShell, L.MaxShell)

	// Bounds, from the commands themselves.
	add("shell.bound.measured", shell.MeasuredPeak <= L.MaxShell && shell.Unmeasured == 0,
		"%d commands reported running at once (of %d measured, %d unmeasured%s) <= maxShell %d",
		shell.MeasuredPeak, shell.Measured, shell.Unmeasured, why(shell.FirstUnmeasured), L.MaxShell)
	add("shell.metrics.honest", metricsShell >= shell.MeasuredPeak,
		"/metrics peak shell %d >= %d measured running at once (a server may not understate what it runs)",
		metricsShell, shell.MeasuredPeak)

	// A ceiling, not a serializer.
	if shell.OfferedPeak > L.MaxShell {
		add("shell.reaches.limit", shell.MeasuredPeak >= L.MaxShell,
			"%d commands ran at once, maxShell %d, with %d shell calls in flight", shell.MeasuredPeak, L.MaxShell, shell.OfferedPeak)
	} else {
		skip("shell.reaches.limit", "offered shell load peaked at %d in flight, not above maxShell %d", shell.OfferedPeak, L.MaxShell)
	}

	add("active.bound", max(int(f.After.Peak.Active), f.Series.MaxActive) <= L.MaxActive,
		"peak active %d (sampled max %d) <= maxActive %d", f.After.Peak.Active, f.Series.MaxActive, L.MaxActive)
	add("nonControl.bound", max(int(f.After.Peak.NonControl), f.Series.MaxNonControl) <= L.MaxNonControl,
		"peak nonControl %d (sampled max %d) <= maxNonControl %d", f.After.Peak.NonControl, f.Series.MaxNonControl, L.MaxNonControl)
	add("queued.bound", max(int(f.After.Peak.Queued), f.Series.MaxQueued) <= L.MaxQueue,
		"peak queued %d (sampled max %d) <= maxQueue %d", f.After.Peak.Queued, f.Series.MaxQueued, L.MaxQueue)

	// Every failure is a structured OVERLOADED or CANCELLED inside HTTP 200.
	var bad []string
	for _, o := range Outcomes {
		if o.Acceptable() {
			continue
		}
		if n := calls.Count("", o); n > 0 {
			bad = append(bad, fmt.Sprintf("%d %s (e.g. %s)", n, o, calls.Examples[o]))
		}
	}
	add("failures.structured", len(bad) == 0 && calls.Total > 0,
		"%d calls: %d ok, %d OVERLOADED, %d CANCELLED; other: %s", calls.Total,
		calls.Count("", OutcomeOK), calls.Count("", OutcomeOverloaded), calls.Count("", OutcomeCancelled), orNone(bad))

	// Control calls go through even when everything else is shed.
	ctlTotal := calls.ClassTotal(mcpwire.ClassControl)
	ctlOK := calls.Count(mcpwire.ClassControl, OutcomeOK)
	ratio := 0.0
	if ctlTotal > 0 {
		ratio = float64(ctlOK) / float64(ctlTotal)
	}
	add("control.success", ctlTotal > 0 && ratio >= th.ControlSuccess,
		"%d/%d control calls ok (%.2f%%), need >= %.2f%%", ctlOK, ctlTotal, 100*ratio, 100*th.ControlSuccess)
	p99 := time.Duration(calls.ByClass[mcpwire.ClassControl].P99Ms * float64(time.Millisecond))
	add("control.p99", ctlTotal > 0 && p99 < th.ControlP99.D(),
		"control p99 %s < %s", p99, th.ControlP99)

	// Liveness throughout.
	add("healthz", f.Health.Samples > 0 && f.Health.Failures == 0,
		"%d/%d /healthz samples answered 200%s", f.Health.Samples-f.Health.Failures, f.Health.Samples, why(f.Health.FirstFailure))
	if p := f.Production; p != nil {
		add("production.healthz", p.Samples > 0 && p.Failures == 0,
			"production %s: %d/%d samples answered 200%s", p.URL, p.Samples-p.Failures, p.Samples, why(p.FirstFailure))
	} else {
		skip("production.healthz", "no production address configured")
	}
	add("metrics.available", f.Series.Samples > 0 && f.Series.Errors == 0,
		"%d /metrics samples, %d failed%s", f.Series.Samples, f.Series.Errors, why(f.Series.FirstErr))

	out = append(out, assessUnit(f.Unit, f.FaultsFrom, th)...)

	// Back to idle, counters balanced.
	add("settle.idle", f.Settled && f.After.Idle(),
		"after the attack: active %d, queued %d (want 0 and 0)", f.After.Active.Total, f.After.Queued.Total)
	out = append(out, assessCounters(f, calls))

	if f.Faults != nil {
		out = append(out, assessFaults(*f.Faults, th)...)
	}
	return out
}

func assessUnit(u *UnitSeries, faultsFrom time.Time, th Thresholds) []Check {
	if u == nil {
		return []Check{
			{Name: "unit.stable", Status: Skip, Detail: "no unit given"},
			{Name: "unit.memory", Status: Skip, Detail: "no unit given"},
		}
	}
	var out []Check
	st := func(ok bool) Status {
		if ok {
			return Pass
		}
		return Fail
	}
	if len(u.Samples) == 0 {
		return []Check{
			{Name: "unit.stable", Status: Fail, Detail: fmt.Sprintf("%s: no sample%s", u.Name, why(u.FirstErr))},
			{Name: "unit.memory", Status: Fail, Detail: fmt.Sprintf("%s: no sample", u.Name)},
		}
	}
	first := u.Samples[0]
	changed := ""
	for _, s := range u.Samples {
		switch {
		case s.MainPID == 0:
			changed = fmt.Sprintf("MainPID 0 (not running) at %s", s.At.Format(time.RFC3339Nano))
		case s.MainPID != first.MainPID, s.InvocationID != first.InvocationID, s.NRestarts != first.NRestarts:
			changed = fmt.Sprintf("MainPID %d->%d, InvocationID %s->%s, NRestarts %d->%d",
				first.MainPID, s.MainPID, short(first.InvocationID), short(s.InvocationID), first.NRestarts, s.NRestarts)
		}
		if changed != "" {
			break
		}
	}
	detail := fmt.Sprintf("%s: MainPID %d, InvocationID %s, NRestarts %d over %d samples", u.Name, first.MainPID, short(first.InvocationID), first.NRestarts, len(u.Samples))
	if changed != "" {
		detail = u.Name + " restarted: " + changed
	}
	if u.Errors > 0 {
		detail += fmt.Sprintf("; %d samples failed%s", u.Errors, why(u.FirstErr))
	}
	out = append(out, Check{Name: "unit.stable", Status: st(changed == "" && u.Errors == 0), Detail: detail})

	var mem []uint64 // during the attack
	var peak uint64  // overall, faults included
	var cgroupPeak uint64
	for _, s := range u.Samples {
		cgroupPeak = max(cgroupPeak, s.CgroupBytes)
		if s.MemoryBytes == 0 {
			continue
		}
		peak = max(peak, s.MemoryBytes)
		if faultsFrom.IsZero() || s.At.Before(faultsFrom) {
			mem = append(mem, s.MemoryBytes)
		}
	}
	if len(mem) < 3 {
		out = append(out, Check{Name: "unit.memory", Status: Skip, Detail: fmt.Sprintf("%d memory samples during the attack, need 3", len(mem))})
		return out
	}
	third := len(mem) / 3
	firstMax, lastMax := slices.Max(mem[:third]), slices.Max(mem[len(mem)-third:])
	limit := uint64(float64(firstMax)*(1+th.MemoryGrowth)) + th.MemorySlack
	ok := lastMax <= limit
	detail = fmt.Sprintf("attack's last third peak %s <= %s (first third peak %s +%.0f%% +%s); overall peak %s",
		mib(lastMax), mib(limit), mib(firstMax), 100*th.MemoryGrowth, mib(th.MemorySlack), mib(peak))
	if cgroupPeak > 0 {
		detail += fmt.Sprintf("; cgroup peak %s", mib(cgroupPeak))
	}
	if th.MemoryHigh > 0 {
		ok = ok && max(peak, cgroupPeak) < th.MemoryHigh
		detail += fmt.Sprintf(" < MemoryHigh %s", mib(th.MemoryHigh))
	}
	out = append(out, Check{Name: "unit.memory", Status: st(ok), Detail: detail})
	return out
}

// assessCounters: every operation that got a slot released it, and
// admission decided exactly once on each call the stress sent.
func assessCounters(f Facts, calls CallStats) Check {
	d := f.After.Counters.Sub(f.Before.Counters)
	// Calls with a tool result certainly passed admission's decision; calls
	// without one (transport or HTTP errors) may or may not have.
	sure := calls.Count("", OutcomeOK) + calls.Count("", OutcomeOverloaded) + calls.Count("", OutcomeCancelled) + calls.Count("", OutcomeToolError)
	unsure := calls.Total - sure
	overloaded := calls.Count("", OutcomeOverloaded)
	if f.Faults != nil {
		sure += f.Faults.ToolCalls
		overloaded += f.Faults.Overloaded
	}
	seen := d.Seen()
	var problems []string
	if f.After.Counters.Accepted != f.After.Counters.Completed {
		problems = append(problems, fmt.Sprintf("accepted %d != completed %d", f.After.Counters.Accepted, f.After.Counters.Completed))
	}
	if seen < int64(sure) || seen > int64(sure+unsure) {
		problems = append(problems, fmt.Sprintf("admission decided on %d calls, the stress sent %d (+%d uncertain)", seen, sure, unsure))
	}
	if shed := d.Rejected + d.TimedOut; shed < int64(overloaded) || shed > int64(overloaded+unsure) {
		problems = append(problems, fmt.Sprintf("rejected+timedOut rose by %d, the stress got %d OVERLOADED (+%d uncertain)", shed, overloaded, unsure))
	}
	if d.Cancelled < int64(calls.Count("", OutcomeCancelled)) {
		problems = append(problems, fmt.Sprintf("cancelled rose by %d, the stress got %d CANCELLED", d.Cancelled, calls.Count("", OutcomeCancelled)))
	}
	c := Check{Name: "counters.balance", Status: Pass, Detail: fmt.Sprintf(
		"accepted %d completed %d; during the run +%d accepted +%d rejected +%d timedOut +%d cancelled = %d decisions for %d calls",
		f.After.Counters.Accepted, f.After.Counters.Completed, d.Accepted, d.Rejected, d.TimedOut, d.Cancelled, seen, sure)}
	if len(problems) > 0 {
		c.Status = Fail
		c.Detail = strings.Join(problems, "; ")
	}
	return c
}

func assessFaults(ff FaultFacts, th Thresholds) []Check {
	var out []Check
	add := func(name string, ok bool, detail string) {
		st := Pass
		if !ok {
			st = Fail
		}
		out = append(out, Check{Name: name, Status: st, Detail: detail})
	}
	q := ff.QueuedDisconnect
	add("fault.disconnect.queued", q.Err == "" && q.Sent > 0 && q.Seen >= q.Sent && q.CancelledDelta >= int64(q.Sent) && q.Released,
		fmt.Sprintf("%d clients left while queued (%d seen queued): cancelled +%d, queue drained %t%s", q.Sent, q.Seen, q.CancelledDelta, q.Released, why(q.Err)))
	r := ff.RunningDisconnect
	add("fault.disconnect.running", r.Err == "" && r.Sent > 0 && r.Seen >= r.Sent && r.ProcsSeen >= r.Sent && r.ProcsLeft == 0 && r.Released,
		fmt.Sprintf("%d clients left while running (%d seen running, %d processes seen): %d processes left, slots released %t%s", r.Sent, r.Seen, r.ProcsSeen, r.ProcsLeft, r.Released, why(r.Err)))
	g := ff.Grandchildren
	add("fault.grandchildren", g.Err == "" && g.ProcsSeen > 0 && g.ProcsLeft == 0 && (g.TimedOut || g.Code == string(mcpwire.CodeTimeout)),
		fmt.Sprintf("timed-out command (%s%s, timedOut %t): %d grandchildren seen, %d survived%s", g.Outcome, codeOf(g.Code), g.TimedOut, g.ProcsSeen, g.ProcsLeft, why(g.Err)))
	okFloods := 0
	var fl []string
	for _, f := range ff.Floods {
		ok := f.Err == "" && f.Status == 200 && f.BodyBytes <= th.ResponseBytes &&
			((f.Outcome == OutcomeOK && f.OutputLimited) || (f.Outcome == OutcomeToolError && f.Code == string(mcpwire.CodeOutputLimit)))
		if ok {
			okFloods++
		}
		fl = append(fl, fmt.Sprintf("%s: HTTP %d %s%s, %s, outputLimited %t%s", f.Name, f.Status, f.Outcome, codeOf(f.Code), mib(uint64(f.BodyBytes)), f.OutputLimited, why(f.Err)))
	}
	add("fault.flood", len(ff.Floods) > 0 && okFloods == len(ff.Floods),
		fmt.Sprintf("capped within %s: %s", mib(uint64(th.ResponseBytes)), strings.Join(fl, "; ")))
	o := ff.Oversized
	add("fault.oversized", o.Status >= 400 && o.Status < 500 && o.HealthyAfter && o.CallOKAfter,
		fmt.Sprintf("%s body: HTTP %d (want 4xx); healthy after %t, tool call ok after %t%s", mib(uint64(o.BodyBytes)), o.Status, o.HealthyAfter, o.CallOKAfter, why(o.Err)))
	s := ff.SlowClient
	add("fault.slow.client", s.Err == "" && s.Status == 200 && s.Outcome == OutcomeOK && s.BodyBytes > 0,
		fmt.Sprintf("slow reader: HTTP %d %s, %s in %s%s", s.Status, s.Outcome, mib(uint64(s.BodyBytes)), s.Took.D().Round(time.Millisecond), why(s.Err)))
	return out
}

func why(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func codeOf(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func mib(b uint64) string {
	return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
}
