package stress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/overdeck/mcp-backend/internal/millis"
	"github.com/overdeck/mcp-backend/mcpclient"
)

// Steady is the profile an operator runs through the tunnels during a
// cutover or rollback: a rate well under capacity with the real tool mix,
// counting every way a call can fail separately. Unlike the other profiles
// it judges nothing about the limits; its counts are the verdict.
const Steady Profile = "steady"

// Steady defaults: 40 calls/s in all, half `sleep 0.3; echo ok`, half
// system.info, each call allowed a minute (a call may wait out a restart in
// the socket's backlog and then its queue time).
const (
	DefaultSteadyRate     = 40.0
	DefaultSteadyDuration = 30 * time.Second
	DefaultSteadyTimeout  = time.Minute
	SteadyShellCommand    = "sleep 0.3; echo ok"
)

// SteadyConfig is one steady run.
type SteadyConfig struct {
	// Targets are base URLs (the tunnels' URLs); calls go to each in turn.
	Targets  []string
	Rate     float64       // calls/s across all targets; 0: DefaultSteadyRate
	Duration time.Duration // 0: DefaultSteadyDuration
	Timeout  time.Duration // per call; 0: DefaultSteadyTimeout
	// Token is sent as a bearer token when set.
	Token string
	// KeepAlive reuses connections between calls, as a pooling client does.
	// Off by default: each call is its own connection, as a tunnel forwards
	// each client connection.
	KeepAlive bool
	// OnCall, when set, sees every call as it completes (from one goroutine).
	OnCall func(SteadyCall)
	// Stop, when closed, ends the run before its duration as if it had
	// passed: no new calls, the ones in flight complete and are counted.
	Stop <-chan struct{}
}

// SteadyCall is one call of a steady run.
type SteadyCall struct {
	Target  string          `json:"target"`
	Tool    string          `json:"tool"`
	Outcome Outcome         `json:"outcome"`
	Code    string          `json:"code,omitempty"`
	Detail  string          `json:"detail,omitempty"`
	Start   time.Time       `json:"start"`
	Latency millis.Duration `json:"latencyMs"`
}

// SteadyCounts are the outcomes of the calls to one target (or all). A call
// is counted once, in exactly one of OK, Transport, HTTP, JSONRPC, Tool and
// BadReply; ByCode splits the failures by HTTP status, JSON-RPC code or tool
// error code.
type SteadyCounts struct {
	Target    string `json:"target"`
	Calls     int    `json:"calls"`
	OK        int    `json:"ok"`
	Transport int    `json:"transportFailures"`
	HTTP      int    `json:"httpErrors"`
	JSONRPC   int    `json:"jsonRpcErrors"`
	Tool      int    `json:"toolErrors"`
	BadReply  int    `json:"badReplies"`
	// HTTPByStatus, JSONRPCByCode and ToolByCode split the errors.
	HTTPByStatus  map[string]int `json:"httpByStatus"`
	JSONRPCByCode map[string]int `json:"jsonRpcByCode"`
	ToolByCode    map[string]int `json:"toolByCode"`
	// Wait is the latency of every call, failed ones included: its max is
	// the longest any caller waited.
	Wait Latency `json:"wait"`
	// Samples are the first failure details of each kind, for the
	// operator to read.
	Samples []string `json:"samples,omitempty"`
	sampled map[string]int
}

// Clean reports no transport failure, no HTTP error, no JSON-RPC error and
// no unreadable reply (tool errors such as UNAVAILABLE are answers).
func (c SteadyCounts) Clean() bool {
	return c.Transport == 0 && c.HTTP == 0 && c.JSONRPC == 0 && c.BadReply == 0
}

// SteadyReport is a steady run.
type SteadyReport struct {
	Profile   Profile        `json:"profile"`
	Rate      float64        `json:"rate"`
	KeepAlive bool           `json:"keepAlive"`
	Started   time.Time      `json:"started"`
	Total     SteadyCounts   `json:"total"`
	Targets   []SteadyCounts `json:"targets"`
	// Pass is Total.Clean(): the verdict, as every verdict document has.
	Pass bool `json:"pass"`
	// Interrupted: stopped (Ctrl-C) before its duration; the counts so far.
	Interrupted bool `json:"interrupted,omitempty"`
	// Duration is last: its ...Ms field has always closed the object.
	Duration millis.Duration `json:"durationMs"`
}

// maxSamples bounds the failure details kept per kind and target.
const maxSamples = 5

func newCounts(target string) SteadyCounts {
	return SteadyCounts{Target: target, HTTPByStatus: map[string]int{}, JSONRPCByCode: map[string]int{}, ToolByCode: map[string]int{}}
}

func (c *SteadyCounts) add(call SteadyCall) {
	c.Calls++
	fail := ""
	switch call.Outcome {
	case OutcomeOK:
		c.OK++
	case OutcomeTransport:
		c.Transport++
		fail = "transport"
	case OutcomeHTTPError:
		c.HTTP++
		c.HTTPByStatus[call.Code]++
		fail = "HTTP " + call.Code
	case OutcomeRPCError:
		c.JSONRPC++
		c.JSONRPCByCode[call.Code]++
		fail = "JSON-RPC " + call.Code
	case OutcomeOverloaded, OutcomeCancelled, OutcomeToolError:
		c.Tool++
		code := call.Code
		if code == "" {
			code = "uncoded"
		}
		c.ToolByCode[code]++
		fail = "tool " + code
	default:
		c.BadReply++
		fail = "bad reply"
	}
	if fail == "" {
		return
	}
	if c.sampled == nil {
		c.sampled = map[string]int{}
	}
	// The first few of each kind: a flood of tool errors must not hide
	// the one transport failure.
	kind, _, _ := strings.Cut(fail, " ")
	if c.sampled[kind] < maxSamples {
		c.sampled[kind]++
		c.Samples = append(c.Samples, fmt.Sprintf("%s %s sent %s, after %s: %s", fail, call.Tool,
			call.Start.UTC().Format("15:04:05.000"), call.Latency.D().Round(time.Millisecond), call.Detail))
	}
}

// SteadyTargets is what the steady profile runs through: the targets
// given, else every tunnel's URL (tunnels are the config's tunnels[].url).
// Each must be a loopback URL or one of the tunnels: never an arbitrary
// host.
func SteadyTargets(given, tunnels []string) ([]string, error) {
	targets := given
	if len(targets) == 0 {
		for _, t := range tunnels {
			if t != "" {
				targets = append(targets, t)
			}
		}
		if len(targets) == 0 {
			return nil, errors.New("steady: no --target and no tunnels[].url in the config: name the tunnel URLs to run through")
		}
	}
	var trimmed []string
	for _, t := range tunnels {
		trimmed = append(trimmed, strings.TrimSuffix(t, "/"))
	}
	for _, t := range targets {
		if CheckLoopback(t) != nil && !slices.Contains(trimmed, strings.TrimSuffix(t, "/")) {
			return nil, fmt.Errorf("--target %s: must be a loopback URL or one of the tunnels' url in the config (%s)", t, strings.Join(trimmed, ", "))
		}
		if u, err := url.Parse(t); err != nil || u.Host == "" {
			return nil, fmt.Errorf("--target %q: want a base URL like http://127.0.0.1:8441", t)
		}
	}
	return targets, nil
}

// CheckSteady validates a steady configuration.
func CheckSteady(cfg SteadyConfig) error {
	if len(cfg.Targets) == 0 {
		return errors.New("steady: no target: give one or more base URLs (the tunnels)")
	}
	for _, t := range cfg.Targets {
		if !strings.HasPrefix(t, "http://") && !strings.HasPrefix(t, "https://") {
			return fmt.Errorf("steady: target %q: want an http:// or https:// base URL", t)
		}
	}
	switch {
	case cfg.Rate < 0 || cfg.Rate > MaxRate:
		return fmt.Errorf("steady: rate %g: must be 0 (the default %g) up to %g calls/s", cfg.Rate, DefaultSteadyRate, MaxRate)
	case cfg.Duration < 0:
		return fmt.Errorf("steady: duration %s: must not be negative", cfg.Duration)
	case cfg.Timeout < 0:
		return fmt.Errorf("steady: timeout %s: must not be negative", cfg.Timeout)
	}
	return nil
}

// steadyCall is the i-th call's tool and arguments: shell.exec and
// system.info alternate, so each half of the load is one of them.
func steadyCall(i uint64) (string, map[string]any) {
	if i%2 == 0 {
		return "shell.exec", map[string]any{"command": SteadyShellCommand, "timeoutMs": 30000}
	}
	return "system.info", map[string]any{}
}

// RunSteady offers the steady load until its duration passes (or ctx ends)
// and counts what every call came to. An error means the run could not be
// carried out; failed calls are counts, not errors.
func RunSteady(ctx context.Context, cfg SteadyConfig) (*SteadyReport, error) {
	if err := CheckSteady(cfg); err != nil {
		return nil, err
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultSteadyRate
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultSteadyDuration
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultSteadyTimeout
	}
	endpoints := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		endpoints[i] = strings.TrimSuffix(t, "/") + "/mcp"
	}
	header := mcpclient.Header(cfg.Token)
	var mu sync.Mutex
	var next uint64
	targeter := func(tgt *vegeta.Target) error {
		if tgt == nil {
			return vegeta.ErrNilTarget
		}
		mu.Lock()
		id := next
		next++
		mu.Unlock()
		tool, args := steadyCall(id)
		tgt.Method = http.MethodPost
		tgt.URL = Tag(endpoints[id%uint64(len(endpoints))], tool, id)
		tgt.Body = callBody(id, tool, args)
		tgt.Header = header.Clone()
		return nil
	}
	// Calls in flight are bounded: the rate times the longest a call may
	// take, so a stalled backend slows the achieved rate instead of
	// growing the load.
	workers := uint64(min(max(cfg.Rate*cfg.Timeout.Seconds(), 64), 4096))
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		DisableKeepAlives:   !cfg.KeepAlive,
		MaxIdleConnsPerHost: 64,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Timeout:   cfg.Timeout,
		Transport: ctxTransport{ctx: ctx, next: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(min(workers, 32)), vegeta.MaxWorkers(workers), vegeta.MaxBody(8<<20))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	if cfg.Stop != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-cfg.Stop:
				atk.Stop()
			case <-done:
			}
		}()
	}

	rep := &SteadyReport{Profile: Steady, Rate: cfg.Rate, Duration: millis.Duration(cfg.Duration), KeepAlive: cfg.KeepAlive, Started: time.Now(), Total: newCounts("all")}
	per := make([]SteadyCounts, len(cfg.Targets))
	waits := make([][]time.Duration, len(cfg.Targets))
	var all []time.Duration
	for i, t := range cfg.Targets {
		per[i] = newCounts(t)
	}
	for res := range atk.Attack(targeter, constantPacer(cfg.Rate), cfg.Duration, "mcpctl-steady") {
		call, i := steadyResult(res, cfg.Targets)
		rep.Total.add(call)
		all = append(all, call.Latency.D())
		if i >= 0 {
			per[i].add(call)
			waits[i] = append(waits[i], call.Latency.D())
		}
		if cfg.OnCall != nil {
			cfg.OnCall(call)
		}
	}
	rep.Total.Wait = Summarize(all)
	for i := range per {
		per[i].Wait = Summarize(waits[i])
	}
	rep.Targets = per
	rep.Pass = rep.Total.Clean()
	if ctx.Err() != nil {
		// The counts so far, never a pass (ErrInterrupted, as Run).
		rep.Interrupted, rep.Pass = true, false
		return rep, fmt.Errorf("steady run: %w: %w", ErrInterrupted, ctx.Err())
	}
	return rep, nil
}

// steadyResult classifies one vegeta result and names its target index.
func steadyResult(res *vegeta.Result, targets []string) (SteadyCall, int) {
	tool, id, err := ParseTag(res.URL)
	call := SteadyCall{Tool: tool, Start: res.Timestamp, Latency: millis.Duration(res.Latency)}
	if err != nil {
		call.Outcome, call.Detail = OutcomeBadReply, err.Error()
		return call, -1
	}
	i := int(id % uint64(len(targets)))
	call.Target = targets[i]
	transportErr := ""
	if res.Code == 0 {
		transportErr = res.Error
	}
	reply := Classify(id, int(res.Code), transportErr, res.Headers.Get("Content-Type"), res.Body)
	call.Outcome, call.Code, call.Detail = reply.Outcome, reply.Code, reply.Detail
	return call, i
}

// Codes lists a count map's keys in order, for stable output.
func Codes(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
