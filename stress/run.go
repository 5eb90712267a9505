package stress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// Config is one stress run.
type Config struct {
	// Target is the backend's base URL (http://127.0.0.1:3211).
	Target string
	// Production, if set, is production's base URL: only its /healthz is
	// sampled, to show the stress does not hurt it.
	Production string

	Profile  Profile
	Duration time.Duration // 0: the profile's default
	Rate     float64       // requests/s; 0: derived from the limits
	Mix      Mix           // zero: DefaultMix
	// ShellSleep is how long each shell.exec of the traffic sleeps.
	ShellSleep time.Duration // 0: 500ms
	Faults     bool

	// Unit observes the unit running the target; nil skips the unit checks.
	Unit     UnitSampler
	UnitName string

	Thresholds Thresholds

	MetricsEvery  time.Duration // 0: 100ms
	HealthEvery   time.Duration // 0: 100ms
	UnitEvery     time.Duration // 0: 500ms
	SettleTimeout time.Duration // 0: 15s

	// OnResult sees every vegeta result of the attack (bodies dropped, the
	// outcome of failed tool calls in Error), e.g. to encode or plot them.
	OnResult func(*vegeta.Result) error

	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Profile == "" {
		c.Profile = Overload
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	if c.ShellSleep == 0 {
		c.ShellSleep = 500 * time.Millisecond
	}
	if c.Thresholds == (Thresholds{}) {
		c.Thresholds = DefaultThresholds()
	}
	if c.MetricsEvery == 0 {
		c.MetricsEvery = 100 * time.Millisecond
	}
	if c.HealthEvery == 0 {
		c.HealthEvery = 100 * time.Millisecond
	}
	if c.UnitEvery == 0 {
		c.UnitEvery = 500 * time.Millisecond
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// SameHostPort says whether base (a URL) points at listen (host:port),
// localhost and 127.0.0.1 being the same: a target that is production.
func SameHostPort(base, listen string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	h1, p1, err1 := net.SplitHostPort(u.Host)
	h2, p2, err2 := net.SplitHostPort(listen)
	if err1 != nil || err2 != nil || p1 != p2 {
		return false
	}
	norm := func(h string) string {
		if h == "localhost" {
			return "127.0.0.1"
		}
		return h
	}
	return norm(h1) == norm(h2)
}

// CheckLoopback refuses any base URL that is not plain http on loopback:
// the stress never aims at another machine.
func CheckLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("url %q: %w", base, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("url %q: must be http://HOST:PORT", base)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("url %q: host must be a loopback address (127.0.0.0/8, ::1 or localhost)", base)
	}
	return nil
}

// ErrInterrupted is the error of a run whose context ended (Ctrl-C) before
// it finished: Run returns it with a partial report of what the calls so
// far showed (Interrupted set, never a pass).
var ErrInterrupted = errors.New("stress interrupted")

// Run attacks the target, samples it, optionally injects faults, and judges
// what it saw. An error means the run could not be carried out (target
// unreachable, bad configuration), or, with a partial report, that it was
// interrupted (ErrInterrupted); a failed assertion is a Report with Pass
// false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := CheckLoopback(cfg.Target); err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	if cfg.Production != "" {
		if err := CheckLoopback(cfg.Production); err != nil {
			return nil, fmt.Errorf("production: %w", err)
		}
	}
	log := cfg.Logger
	target := NewClient(cfg.Target, 5*time.Second)
	defer target.Close()

	before, err := target.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the target's limits: %w", err)
	}
	limits := before.Limits
	if err := checkLimits(limits); err != nil {
		return nil, err
	}
	plan, err := PlanFor(cfg.Profile, limits, cfg.Mix, cfg.ShellSleep, cfg.Duration, cfg.Rate)
	if err != nil {
		return nil, err
	}
	if cfg.Unit != nil {
		if _, err := cfg.Unit.Sample(ctx); err != nil {
			return nil, fmt.Errorf("unit %s: %w", cfg.UnitName, err)
		}
	}
	traffic, err := NewTraffic(cfg.Target, cfg.Mix, cfg.ShellSleep, 1)
	if err != nil {
		return nil, err
	}

	var prod *Client
	if cfg.Production != "" {
		prod = NewClient(cfg.Production, 5*time.Second)
		defer prod.Close()
	}
	smp := startSamplers(ctx, samplerConfig{
		target: target, production: prod, unit: cfg.Unit, unitName: cfg.UnitName,
		metricsEvery: cfg.MetricsEvery, healthEvery: cfg.HealthEvery, unitEvery: cfg.UnitEvery,
	})
	stopped := false
	defer func() {
		if !stopped {
			smp.stop()
		}
	}()

	log.Debug("stress attack", "target", cfg.Target, "profile", plan.Profile, "duration", plan.Duration.D(),
		"startRate", plan.StartRate, "endRate", plan.EndRate, "limits", limits)
	began := time.Now()
	calls, err := attack(ctx, cfg, plan, limits, traffic)
	attackTook := time.Since(began)
	if err != nil && !errors.Is(err, ErrInterrupted) {
		return nil, err
	}

	var after mcpwire.Metrics
	var settled bool
	if ctx.Err() == nil {
		after, settled = settle(ctx, target, cfg.SettleTimeout)
	}
	var faults *FaultFacts
	var faultsFrom time.Time
	if cfg.Faults && ctx.Err() == nil {
		faultsFrom = time.Now()
		ff := runFaults(ctx, faultEnv{
			target: target, base: cfg.Target, limits: limits,
			responseBytes: cfg.Thresholds.ResponseBytes, log: log,
		})
		faults = &ff
		after, settled = settle(ctx, target, cfg.SettleTimeout)
	}
	interrupted := ctx.Err() != nil
	if interrupted {
		// One last look at the target, on a short context of its own: the
		// run's is over, and the partial report wants the counters.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if m, err := target.Metrics(lctx); err == nil {
			after = m
		}
		cancel()
	}
	smp.stop()
	stopped = true

	facts := Facts{
		Limits: limits, Before: before, After: after, Settled: settled,
		Calls: calls, Series: smp.metrics, Health: smp.health, Production: smp.production, Unit: smp.unit,
		Faults: faults, FaultsFrom: faultsFrom,
	}
	checks := Assess(facts, cfg.Thresholds)
	if interrupted {
		checks = append(checks, Check{Name: "run.complete", Status: Fail,
			Detail: fmt.Sprintf("interrupted after %.1fs of %s with %d calls: a partial report", attackTook.Seconds(), plan.Duration, len(calls))})
	}
	rep := newReport(cfg, plan, facts, attackTook, checks)
	if interrupted {
		rep.Interrupted = true
		return rep, fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
	}
	return rep, nil
}

// attack runs vegeta with the traffic and classifies every result.
func attack(ctx context.Context, cfg Config, plan Plan, limits mcpwire.Limits, traffic *Traffic) ([]CallRecord, error) {
	// Long enough for a call to wait its whole queue time and then run.
	timeout := limits.QueueWait() + cfg.ShellSleep + 15*time.Second
	// Bounded in-flight requests: what the backend may hold plus headroom.
	// A backend that hangs makes the achieved rate drop, not the load grow.
	workers := uint64(max(256, 4*(limits.MaxActive+limits.MaxQueue)))
	tr := &http.Transport{
		Proxy:               nil, // loopback only, never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: int(workers),
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Timeout:   timeout,
		Transport: ctxTransport{ctx: ctx, next: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(min(workers, 32)),
		vegeta.MaxWorkers(workers),
		vegeta.MaxBody(cfg.Thresholds.ResponseBytes+1<<20),
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()

	calls := make([]CallRecord, 0, plan.Requests()+16)
	var onResultErr error
	for res := range atk.Attack(traffic.Targeter(), plan.Pacer, plan.Duration.D(), "mcpctl-stress") {
		rec := classifyResult(res)
		calls = append(calls, rec)
		if cfg.OnResult != nil && onResultErr == nil {
			if err := cfg.OnResult(res); err != nil {
				onResultErr = err
				atk.Stop()
			}
		}
	}
	if onResultErr != nil {
		return nil, fmt.Errorf("write results: %w", onResultErr)
	}
	if ctx.Err() != nil {
		return calls, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
	}
	return calls, nil
}

// classifyResult turns a vegeta result into a call record. It drops the body
// (the record keeps what matters) and writes a failed tool call's outcome
// into Error, since vegeta counts every HTTP 200 as a success.
func classifyResult(res *vegeta.Result) CallRecord {
	tool, id, err := ParseTag(res.URL)
	rec := CallRecord{ID: id, Tool: tool, Class: mcpwire.ClassOf(tool), Start: res.Timestamp, Latency: millis.Duration(res.Latency)}
	if err != nil {
		rec.Outcome, rec.Detail = OutcomeBadReply, err.Error()
		return rec
	}
	transportErr := ""
	if res.Code == 0 {
		transportErr = res.Error
	}
	reply := Classify(id, int(res.Code), transportErr, res.Headers.Get("Content-Type"), res.Body)
	rec.Outcome, rec.Code, rec.Detail = reply.Outcome, reply.Code, reply.Detail
	if rec.Class == mcpwire.ClassShell && reply.Outcome == OutcomeOK {
		sh, err := reply.Shell()
		if err == nil {
			var sp Span
			if sp, err = ParseSpan(sh.Stdout); err == nil {
				rec.Span = &sp
			}
		}
		if err != nil {
			rec.SpanErr = err.Error()
		}
	}
	res.Body = nil
	if reply.Outcome != OutcomeOK && res.Error == "" {
		res.Error = string(reply.Outcome) + ": " + strings.TrimSpace(reply.Code+" "+reply.Detail)
	}
	return rec
}

// ctxTransport ties every request to the run's context, so an interrupted
// run abandons its in-flight requests instead of waiting them out.
type ctxTransport struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := mergeCancel(r.Context(), t.ctx)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// mergeCancel returns a context of a that is also cancelled with b.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stop(); cancel(nil) }
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// settle polls /metrics until nothing is active or queued and every accepted
// operation completed, or the timeout passes.
func settle(ctx context.Context, c *Client, timeout time.Duration) (mcpwire.Metrics, bool) {
	deadline := time.Now().Add(timeout)
	var last mcpwire.Metrics
	for {
		m, err := c.Metrics(ctx)
		if err == nil {
			last = m
			if m.Idle() && m.Counters.Accepted == m.Counters.Completed {
				return m, true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
