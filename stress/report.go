package stress

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"

	"github.com/overdeck/mcp-backend/internal/textwrap"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Report is the outcome of a run: what was offered, what came back, what
// the target and its unit did, and the checks. Its JSON is stable for
// scripts: fields are only ever added.
type Report struct {
	Target       string  `json:"target"`
	Production   string  `json:"production,omitempty"`
	Unit         string  `json:"unit,omitempty"`
	Profile      Profile `json:"profile"`
	Plan         Plan    `json:"plan"`
	Mix          Mix     `json:"mix"`
	ShellSleepMs float64 `json:"shellSleepMs"`
	Faults       bool    `json:"faults"`

	Requests      int     `json:"requests"`
	AttackSeconds float64 `json:"attackSeconds"`
	OfferedRate   float64 `json:"offeredRate"`
	AchievedRate  float64 `json:"achievedRate"`

	Limits    mcpwire.Limits                        `json:"limits"`
	Outcomes  map[mcpwire.Class]map[Outcome]int     `json:"outcomes"`
	Latency   map[mcpwire.Class]map[Outcome]Latency `json:"latency"`
	ByClass   map[mcpwire.Class]Latency             `json:"latencyByClass"`
	ByOutcome map[Outcome]Latency                   `json:"latencyByOutcome"`
	Examples  map[Outcome]string                    `json:"examples,omitempty"`
	Shell     ShellStats                            `json:"shell"`

	Metrics     MetricsReport `json:"metrics"`
	Healthz     HealthReport  `json:"healthz"`
	ProdHealthz *HealthReport `json:"productionHealthz,omitempty"`
	UnitSamples *UnitReport   `json:"unitSamples,omitempty"`
	FaultFacts  *FaultFacts   `json:"faultFacts,omitempty"`

	Thresholds Thresholds `json:"thresholds"`
	Checks     []Check    `json:"checks"`
	Pass       bool       `json:"pass"`
	// Interrupted: the run was stopped (Ctrl-C) before it finished; the
	// report covers the calls until then and never passes.
	Interrupted bool `json:"interrupted,omitempty"`
	// Build is filled in by the caller that records the verdict.
	Build *Build `json:"build,omitempty"`
}

// MetricsReport is the target's own view.
type MetricsReport struct {
	Before  mcpwire.Metrics `json:"before"`
	After   mcpwire.Metrics `json:"after"`
	Settled bool            `json:"settled"`
	Series  MetricsSeries   `json:"series"`
}

// HealthReport summarises /healthz samples.
type HealthReport struct {
	URL          string  `json:"url"`
	Samples      int     `json:"samples"`
	Failures     int     `json:"failures"`
	FirstFailure string  `json:"firstFailure,omitempty"`
	Latency      Latency `json:"latency"`
}

// UnitReport summarises the unit samples.
type UnitReport struct {
	Name       string     `json:"name"`
	Samples    int        `json:"samples"`
	Errors     int        `json:"errors"`
	First      UnitSample `json:"first"`
	Last       UnitSample `json:"last"`
	PeakMemory uint64     `json:"peakMemory"`
}

func healthReport(h HealthSeries) HealthReport {
	return HealthReport{URL: h.URL, Samples: h.Samples, Failures: h.Failures, FirstFailure: h.FirstFailure, Latency: Summarize(h.Latencies)}
}

func newReport(cfg Config, plan Plan, f Facts, took time.Duration, checks []Check) *Report {
	cs := CallStatsOf(f.Calls)
	r := &Report{
		Target: cfg.Target, Production: cfg.Production, Unit: cfg.UnitName,
		Profile: plan.Profile, Plan: plan, Mix: cfg.Mix, ShellSleepMs: ms(cfg.ShellSleep), Faults: cfg.Faults,
		Requests: len(f.Calls), AttackSeconds: round3(took.Seconds()), OfferedRate: round3(plan.MeanRate()),
		Limits: f.Limits, Outcomes: cs.Counts, ByClass: cs.ByClass, ByOutcome: cs.ByOutcome, Examples: cs.Examples,
		Latency: map[mcpwire.Class]map[Outcome]Latency{},
		Shell:   ShellStatsOf(f.Calls),
		Metrics: MetricsReport{Before: f.Before, After: f.After, Settled: f.Settled, Series: f.Series},
		Healthz: healthReport(f.Health), FaultFacts: f.Faults,
		Thresholds: cfg.Thresholds, Checks: checks, Pass: Passed(checks),
	}
	r.AchievedRate = round3(sendRate(f.Calls))
	for c, m := range cs.Counts {
		r.Latency[c] = map[Outcome]Latency{}
		for o := range m {
			r.Latency[c][o] = cs.Of(c, o)
		}
	}
	if f.Production != nil {
		h := healthReport(*f.Production)
		r.ProdHealthz = &h
	}
	if u := f.Unit; u != nil {
		ur := &UnitReport{Name: u.Name, Samples: len(u.Samples), Errors: u.Errors}
		if len(u.Samples) > 0 {
			ur.First, ur.Last = u.Samples[0], u.Samples[len(u.Samples)-1]
		}
		for _, s := range u.Samples {
			ur.PeakMemory = max(ur.PeakMemory, s.MemoryBytes)
		}
		r.UnitSamples = ur
	}
	return r
}

// sendRate is the rate requests actually went out at: vegeta falls behind
// the offered rate when the client runs out of workers or CPU.
func sendRate(calls []CallRecord) float64 {
	if len(calls) < 2 {
		return 0
	}
	first, last := calls[0].Start, calls[0].Start
	for _, c := range calls {
		if c.Start.Before(first) {
			first = c.Start
		}
		if c.Start.After(last) {
			last = c.Start
		}
	}
	if d := last.Sub(first); d > 0 {
		return float64(len(calls)-1) / d.Seconds()
	}
	return 0
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Render writes the report for people within 80 columns (RenderWidth).
func (r *Report) Render(w io.Writer, color bool) error { return r.RenderWidth(w, color, 80) }

// RenderWidth writes the report for people: lipgloss tables, styled when
// color is set and w is a terminal, plain ASCII otherwise; lines and tables
// fit width columns (0: as wide as they need, the check table 120).
func (r *Report) RenderWidth(w io.Writer, color bool, width int) error {
	re := lipgloss.NewRenderer(w)
	if !color {
		re.SetColorProfile(termenv.Ascii)
	}
	plain := re.NewStyle()
	bold := plain.Bold(true)
	pass := plain.Foreground(lipgloss.Color("2")).Bold(true)
	fail := plain.Foreground(lipgloss.Color("1")).Bold(true)
	dim := plain.Faint(true)
	status := func(s Status) string {
		switch s {
		case Pass:
			return pass.Render(string(s))
		case Fail:
			return fail.Render(string(s))
		}
		return dim.Render(string(s))
	}
	newTable := func(headers ...string) *table.Table {
		t := table.New().Headers(headers...)
		if color {
			t = t.Border(lipgloss.RoundedBorder()).BorderStyle(dim)
		} else {
			t = t.Border(lipgloss.ASCIIBorder())
		}
		return t.StyleFunc(func(row, _ int) lipgloss.Style {
			st := plain.Padding(0, 1)
			if row == table.HeaderRow {
				st = st.Inherit(bold)
			}
			return st
		})
	}
	var b strings.Builder
	head := bold.Render("mcpctl stress") + " " + r.Target + " (" + string(r.Profile) + ")"
	if r.Interrupted {
		head += " " + fail.Render("INTERRUPTED: partial report")
	}
	fmt.Fprintln(&b, head)
	rate := fmt.Sprintf("%.1f/s", r.Plan.StartRate)
	if r.Plan.StartRate != r.Plan.EndRate {
		rate = fmt.Sprintf("%.1f/s -> %.1f/s", r.Plan.StartRate, r.Plan.EndRate)
	}
	fmt.Fprintln(&b, textwrap.Wrap(fmt.Sprintf("offered %s for %s (capacity ~%.1f/s, mix shell:normal:control %d:%d:%d, shell sleep %s); achieved %.1f/s, %d requests, attack over in %.1fs",
		rate, r.Plan.Duration, r.Plan.CapacityRate, r.Mix.Shell, r.Mix.Normal, r.Mix.Control, time.Duration(r.ShellSleepMs*float64(time.Millisecond)), r.AchievedRate, r.Requests, r.AttackSeconds), width, "  "))
	L := r.Limits
	fmt.Fprintln(&b, textwrap.Wrap(fmt.Sprintf("limits: maxActive %d, reservedControl %d, maxNonControl %d, maxShell %d, maxQueue %d, queueWait %s",
		L.MaxActive, L.ReservedControl, L.MaxNonControl, L.MaxShell, L.MaxQueue, L.QueueWait()), width, "  "))

	lat := newTable("class", "outcome", "count", "p50", "p95", "p99", "max")
	for _, c := range mcpwire.Classes() {
		for _, o := range Outcomes {
			n := r.Outcomes[c][o]
			if n == 0 {
				continue
			}
			l := r.Latency[c][o]
			lat.Row(string(c), string(o), strconv.Itoa(n), fms(l.P50Ms), fms(l.P95Ms), fms(l.P99Ms), fms(l.MaxMs))
		}
		if l, ok := r.ByClass[c]; ok {
			lat.Row(string(c), "(all)", strconv.Itoa(l.Count), fms(l.P50Ms), fms(l.P95Ms), fms(l.P99Ms), fms(l.MaxMs))
		}
	}
	for _, o := range Outcomes {
		if l, ok := r.ByOutcome[o]; ok {
			lat.Row("(all)", string(o), strconv.Itoa(l.Count), fms(l.P50Ms), fms(l.P95Ms), fms(l.P99Ms), fms(l.MaxMs))
		}
	}
	h := r.Healthz.Latency
	lat.Row("/healthz", fmt.Sprintf("%d failed", r.Healthz.Failures), strconv.Itoa(h.Count), fms(h.P50Ms), fms(h.P95Ms), fms(h.P99Ms), fms(h.MaxMs))
	if p := r.ProdHealthz; p != nil {
		l := p.Latency
		lat.Row("prod /healthz", fmt.Sprintf("%d failed", p.Failures), strconv.Itoa(l.Count), fms(l.P50Ms), fms(l.P95Ms), fms(l.P99Ms), fms(l.MaxMs))
	}
	fmt.Fprintln(&b, lat.Render())

	S, M := r.Shell, r.Metrics
	peaks := newTable("peak", "measured", "limit")
	peaks.Row("shell running (commands' own clock)", strconv.Itoa(S.MeasuredPeak), strconv.Itoa(L.MaxShell))
	peaks.Row("shell in flight (offered)", strconv.Itoa(S.OfferedPeak), "-")
	peaks.Row("shell (/metrics peak, sampled)", fmt.Sprintf("%d, %d", M.After.Peak.Shell, M.Series.MaxShell), strconv.Itoa(L.MaxShell))
	peaks.Row("active (/metrics peak, sampled)", fmt.Sprintf("%d, %d", M.After.Peak.Active, M.Series.MaxActive), strconv.Itoa(L.MaxActive))
	peaks.Row("nonControl (/metrics peak, sampled)", fmt.Sprintf("%d, %d", M.After.Peak.NonControl, M.Series.MaxNonControl), strconv.Itoa(L.MaxNonControl))
	peaks.Row("queued (/metrics peak, sampled)", fmt.Sprintf("%d, %d", M.After.Peak.Queued, M.Series.MaxQueued), strconv.Itoa(L.MaxQueue))
	if u := r.UnitSamples; u != nil {
		peaks.Row("memory ("+u.Name+")", mib(u.PeakMemory), mibOr(r.Thresholds.MemoryHigh))
	}
	fmt.Fprintln(&b, peaks.Render())

	tw := width
	if tw <= 0 {
		tw = 120
	}
	checks := newTable("check", "result", "detail").Width(tw)
	for _, c := range r.Checks {
		checks.Row(c.Name, status(c.Status), c.Detail)
	}
	fmt.Fprintln(&b, checks.Render())
	verdict := pass.Render("PASS")
	if !r.Pass {
		verdict = fail.Render("FAIL")
	}
	fmt.Fprintln(&b, bold.Render("verdict: ")+verdict)
	if bd := r.Build; bd != nil {
		switch {
		case bd.Recorded:
			fmt.Fprintf(&b, "recorded for %s (version %s)\n", bd.Digest, bd.Version)
		case bd.Note != "":
			fmt.Fprintln(&b, "not recorded: "+bd.Note)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fms(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.1fms", v)
}

func mibOr(b uint64) string {
	if b == 0 {
		return "-"
	}
	return mib(b)
}
