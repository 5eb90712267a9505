package stress

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/internal/procfs"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// UnitSample is one observation of the target's systemd unit (or process).
type UnitSample struct {
	At           time.Time `json:"at"`
	MainPID      uint32    `json:"mainPID"`
	InvocationID string    `json:"invocationID"`
	NRestarts    uint32    `json:"nRestarts"`
	MemoryBytes  uint64    `json:"memoryBytes"` // the main process's RSS; 0 when unknown
	// CgroupBytes is the unit's whole cgroup (commands and page cache
	// included), what MemoryHigh limits; 0 when unknown.
	CgroupBytes uint64 `json:"cgroupBytes,omitempty"`
}

// UnitSampler observes the unit that runs the target. The command wires it
// to systemd over D-Bus; tests use ProcSampler on a child process.
type UnitSampler interface {
	Sample(ctx context.Context) (UnitSample, error)
}

var _ UnitSampler = (*ProcSampler)(nil)

// ProcSampler observes a plain process through /proc: its start time stands
// in for the invocation id and VmRSS for the memory.
type ProcSampler struct {
	PID int
}

// Sample reads /proc/PID/stat and /proc/PID/status.
func (p *ProcSampler) Sample(context.Context) (UnitSample, error) {
	s := UnitSample{At: time.Now()}
	st, ok := procfs.Read(p.PID)
	if !ok {
		return s, fmt.Errorf("sample pid %d: no such process", p.PID)
	}
	if st.State == "Z" || st.State == "X" {
		return s, fmt.Errorf("sample pid %d: process is dead (state %s)", p.PID, st.State)
	}
	s.MainPID = uint32(p.PID)
	s.InvocationID = "pid" + strconv.Itoa(p.PID) + "-start" + strconv.FormatInt(st.StartTicks, 10)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
	if err != nil {
		return s, fmt.Errorf("sample pid %d: %w", p.PID, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				s.MemoryBytes = kb << 10
			}
		}
	}
	return s, nil
}

// MetricsSeries summarises the /metrics samples taken during a run.
type MetricsSeries struct {
	Samples  int    `json:"samples"`
	Errors   int    `json:"errors"`
	FirstErr string `json:"firstError,omitempty"`
	// Maxima of the sampled current values (the server's peak fields are
	// lifetime high-water marks and are judged separately).
	MaxActive     int `json:"maxActive"`
	MaxControl    int `json:"maxControl"`
	MaxNonControl int `json:"maxNonControl"`
	MaxShell      int `json:"maxShell"`
	MaxQueued     int `json:"maxQueued"`
}

func (s *MetricsSeries) add(m mcpwire.Metrics, err error) {
	if err != nil {
		s.Errors++
		if s.FirstErr == "" {
			s.FirstErr = err.Error()
		}
		return
	}
	s.Samples++
	s.MaxActive = max(s.MaxActive, int(m.Active.Total))
	s.MaxControl = max(s.MaxControl, int(m.Active.Control))
	s.MaxNonControl = max(s.MaxNonControl, int(m.Active.NonControl))
	s.MaxShell = max(s.MaxShell, int(m.Active.Shell))
	s.MaxQueued = max(s.MaxQueued, int(m.Queued.Total))
}

// HealthSeries summarises the /healthz samples of one endpoint.
type HealthSeries struct {
	URL          string          `json:"url"`
	Samples      int             `json:"samples"`
	Failures     int             `json:"failures"`
	FirstFailure string          `json:"firstFailure,omitempty"`
	Latencies    []time.Duration `json:"-"`
}

func (h *HealthSeries) add(code int, err error, took time.Duration) {
	h.Samples++
	h.Latencies = append(h.Latencies, took)
	if err == nil && code == 200 {
		return
	}
	h.Failures++
	if h.FirstFailure == "" {
		if err != nil {
			h.FirstFailure = err.Error()
		} else {
			h.FirstFailure = "HTTP " + strconv.Itoa(code)
		}
	}
}

// UnitSeries holds every unit sample, in order.
type UnitSeries struct {
	Name     string       `json:"name"`
	Samples  []UnitSample `json:"samples"`
	Errors   int          `json:"errors"`
	FirstErr string       `json:"firstError,omitempty"`
}

// samplers runs the periodic observations of one run. Each series is owned
// by its goroutine until stop returns.
type samplers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	metrics    MetricsSeries
	health     HealthSeries
	production *HealthSeries
	unit       *UnitSeries
}

type samplerConfig struct {
	target, production *Client
	unit               UnitSampler
	unitName           string
	metricsEvery       time.Duration
	healthEvery        time.Duration
	unitEvery          time.Duration
}

func startSamplers(ctx context.Context, c samplerConfig) *samplers {
	ctx, cancel := context.WithCancel(ctx)
	s := &samplers{cancel: cancel}
	s.health.URL = c.target.base + "/healthz"
	s.loop(ctx, c.metricsEvery, func(ctx context.Context) {
		m, err := c.target.Metrics(ctx)
		if ctx.Err() == nil {
			s.metrics.add(m, err)
		}
	})
	s.loop(ctx, c.healthEvery, healthProbe(c.target, &s.health))
	if c.production != nil {
		s.production = &HealthSeries{URL: c.production.base + "/healthz"}
		s.loop(ctx, c.healthEvery, healthProbe(c.production, s.production))
	}
	if c.unit != nil {
		s.unit = &UnitSeries{Name: c.unitName}
		s.loop(ctx, c.unitEvery, func(ctx context.Context) {
			u, err := c.unit.Sample(ctx)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				s.unit.Errors++
				if s.unit.FirstErr == "" {
					s.unit.FirstErr = err.Error()
				}
			default:
				s.unit.Samples = append(s.unit.Samples, u)
			}
		})
	}
	return s
}

func healthProbe(c *Client, into *HealthSeries) func(context.Context) {
	return func(ctx context.Context) {
		t0 := time.Now()
		code, err := c.Health(ctx)
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // the run ended mid-probe: not a failure of the target
		}
		into.add(code, err, time.Since(t0))
	}
}

// loop calls fn at once and then every interval until ctx ends.
func (s *samplers) loop(ctx context.Context, every time.Duration, fn func(context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends the samplers and waits for them; the series are then safe to read.
func (s *samplers) stop() {
	s.cancel()
	s.wg.Wait()
}
