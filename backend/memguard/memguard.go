// Package memguard holds the backend's memory guard: it samples the
// process's own cgroup v2 memory (memory.current, the anon line of
// memory.stat, memory.high and memory.max) on a ticker and says when new
// normal work must be refused, with hysteresis, so the process sheds load
// before the kernel throttles or kills it. While other processes of the
// service run beside it (the production slots during a cutover), it also
// reads the cgroup that holds them all (the parent of its own: the slots'
// slice), and each process sheds when the service is above its mark, so
// they refuse together.
package memguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Default marks: shed above 85 % of the limit, recover below 75 %.
const (
	DefaultHighPercent = 85
	DefaultLowPercent  = 75
	DefaultInterval    = 500 * time.Millisecond
)

// ErrNoCgroup says the process has no cgroup v2 memory controller to read
// (cgroup v1 or hybrid hosts, or a missing mount): the guard stays off.
var ErrNoCgroup = errors.New("no cgroup v2 memory controller")

// Options say where the cgroup lives and where the marks are.
type Options struct {
	// Root is the cgroup v2 mount ("/sys/fs/cgroup" when empty).
	Root string
	// ProcCgroup is the file naming our cgroup ("/proc/self/cgroup" when empty).
	ProcCgroup string
	// HighPercent and LowPercent of the limit; 85 and 75 when zero.
	HighPercent, LowPercent int
}

// Sample is one reading of the cgroup, and the guard's state after it.
type Sample struct {
	Enabled   bool   `json:"enabled"`
	Shedding  bool   `json:"shedding"`
	Current   int64  `json:"current"`   // memory.current (includes page cache)
	Anon      int64  `json:"anon"`      // anon of memory.stat: what the process itself holds
	Limit     int64  `json:"limit"`     // memory.high, else memory.max; 0: none
	LimitFrom string `json:"limitFrom"` // "memory.high", "memory.max" or ""
	HighWater int64  `json:"highWater"` // shed at or above (bytes of anon)
	LowWater  int64  `json:"lowWater"`  // recover below
	Sheds     int64  `json:"sheds"`     // times shedding started
	Error     string `json:"error,omitempty"`
	// Service is the reading of the cgroup holding every process of the
	// service, taken while others run beside this one; absent otherwise.
	Service *Reading `json:"service,omitempty"`
}

// Reading is one cgroup's figures and marks.
type Reading struct {
	Cgroup    string `json:"cgroup"`
	Current   int64  `json:"current"`
	Anon      int64  `json:"anon"`
	Limit     int64  `json:"limit"`
	LimitFrom string `json:"limitFrom"`
	HighWater int64  `json:"highWater"`
	LowWater  int64  `json:"lowWater"`
	Error     string `json:"error,omitempty"`
}

// Guard samples one cgroup. Shedding is read on the hot path as one atomic
// load; the files are read only by Sample (the ticker).
type Guard struct {
	dir       string
	high, low int
	shedding  atomic.Bool
	sheds     atomic.Int64
	last      atomic.Pointer[Sample]
	shared    atomic.Pointer[func() bool]
}

// MeasureService makes the guard read, whenever shared reports that other
// processes of the service run beside this one, the cgroup above its own
// too, and shed when either is above its high mark (and recover only when
// both are below their low marks).
func (g *Guard) MeasureService(shared func() bool) {
	if g != nil {
		g.shared.Store(&shared)
	}
}

// serviceShared reports whether the service's cgroup is to be read now.
func (g *Guard) serviceShared() bool {
	f := g.shared.Load()
	return f != nil && (*f)()
}

// read reads one cgroup's figures and sets its marks.
func (g *Guard) read(dir string) (Reading, error) {
	r := Reading{Cgroup: dir}
	cur, err := readInt(filepath.Join(dir, "memory.current"))
	if err != nil {
		return r, err
	}
	r.Current, r.Anon = cur, cur
	if anon, err := statField(filepath.Join(dir, "memory.stat"), "anon"); err == nil {
		r.Anon = anon
	}
	for _, f := range []string{"memory.high", "memory.max"} {
		if v, err := readInt(filepath.Join(dir, f)); err == nil && v > 0 {
			r.Limit, r.LimitFrom = v, f
			break
		}
	}
	if r.Limit > 0 {
		r.HighWater = r.Limit / 100 * int64(g.high)
		r.LowWater = r.Limit / 100 * int64(g.low)
	}
	return r, nil
}

// New finds the process's cgroup v2 directory. It returns ErrNoCgroup
// (wrapped) when there is none with a memory controller; the caller then
// runs without the guard.
func New(o Options) (*Guard, error) {
	if o.Root == "" {
		o.Root = "/sys/fs/cgroup"
	}
	if o.ProcCgroup == "" {
		o.ProcCgroup = "/proc/self/cgroup"
	}
	if o.HighPercent == 0 {
		o.HighPercent = DefaultHighPercent
	}
	if o.LowPercent == 0 {
		o.LowPercent = DefaultLowPercent
	}
	if o.LowPercent <= 0 || o.LowPercent >= o.HighPercent || o.HighPercent > 100 {
		return nil, fmt.Errorf("memguard: marks low %d%% / high %d%%: want 0 < low < high <= 100", o.LowPercent, o.HighPercent)
	}
	b, err := os.ReadFile(o.ProcCgroup)
	if err != nil {
		return nil, fmt.Errorf("memguard: %w: %w", ErrNoCgroup, err)
	}
	rel, ok := unifiedPath(b)
	if !ok {
		return nil, fmt.Errorf("memguard: %w: %s has no 0:: line", ErrNoCgroup, o.ProcCgroup)
	}
	dir := filepath.Join(o.Root, filepath.Clean("/"+rel))
	if _, err := os.Stat(filepath.Join(dir, "memory.current")); err != nil {
		return nil, fmt.Errorf("memguard: %w: %w", ErrNoCgroup, err)
	}
	g := &Guard{dir: dir, high: o.HighPercent, low: o.LowPercent}
	g.Sample()
	return g, nil
}

// Dir is the cgroup directory the guard reads.
func (g *Guard) Dir() string { return g.dir }

func unifiedPath(b []byte) (string, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// Shedding says whether new normal work must be refused now. Nil-safe: a
// process without a guard never sheds.
func (g *Guard) Shedding() bool { return g != nil && g.shedding.Load() }

// Last is the latest sample; the zero Sample for a nil guard.
func (g *Guard) Last() Sample {
	if g == nil {
		return Sample{}
	}
	if s := g.last.Load(); s != nil {
		return *s
	}
	return Sample{Enabled: true}
}

// Run samples every interval until ctx ends.
func (g *Guard) Run(ctx context.Context, interval time.Duration) {
	if g == nil {
		return
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Sample()
		}
	}
}

// Sample reads the cgroup once (and the service's, while shared) and
// updates the state. A read error of its own cgroup keeps the previous
// state (a guard that cannot see must not flap) and is shown; one of the
// service's leaves the decision to its own.
func (g *Guard) Sample() Sample {
	s := Sample{Enabled: true}
	r, err := g.read(g.dir)
	if err != nil {
		s.Error = err.Error()
		s.Shedding = g.shedding.Load()
		s.Sheds = g.sheds.Load()
		g.last.Store(&s)
		return s
	}
	s.Current, s.Anon, s.Limit, s.LimitFrom, s.HighWater, s.LowWater = r.Current, r.Anon, r.Limit, r.LimitFrom, r.HighWater, r.LowWater
	// Page cache is reclaimable and would make a file-heavy load shed for
	// nothing: anon memory decides.
	above := r.Limit > 0 && r.Anon >= r.HighWater
	below := r.Limit == 0 || r.Anon < r.LowWater
	if g.serviceShared() {
		sr, err := g.read(filepath.Dir(g.dir))
		if err != nil {
			sr.Error = err.Error()
		} else if sr.Limit > 0 {
			above = above || sr.Anon >= sr.HighWater
			below = below && sr.Anon < sr.LowWater
		}
		s.Service = &sr
	}
	switch {
	case above && !g.shedding.Load():
		g.shedding.Store(true)
		g.sheds.Add(1)
	case below:
		g.shedding.Store(false)
	}
	s.Shedding = g.shedding.Load()
	s.Sheds = g.sheds.Load()
	g.last.Store(&s)
	return s
}

// readInt reads a one-number cgroup file; "max" is 0 (no limit).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	t := strings.TrimSpace(string(b))
	if t == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s = %q: want a byte count or max", path, t)
	}
	return v, nil
}

// statField reads one "key value" line of memory.stat.
func statField(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 || n == math.MaxInt64 {
				return 0, fmt.Errorf("%s: %s = %q: want a byte count", path, key, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no %s line", path, key)
}
