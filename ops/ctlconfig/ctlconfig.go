// Package ctlconfig holds mcpctl's own configuration, mcpctl.json: where the
// backend and canary live, where releases and state go, the tunnels, the
// rollback deadline and the systemd guardrails of the backend units.
package ctlconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/internal/strictjson"
	"github.com/overdeck/mcp-backend/units"
)

// DefaultPath is where mcpctl looks for its config when none is named.
const DefaultPath = "/etc/mcpctl/mcpctl.json"

// Config is mcpctl.json (the file operators write, keys pinned as documented in the README). Every key is optional; Default holds
// the values a missing key keeps.
type Config struct {
	Backend    ServiceConfig `json:"backend"`
	Canary     ServiceConfig `json:"canary"`
	Install    Install       `json:"install"`
	UnitDir    string        `json:"unitDir"`
	StateDir   string        `json:"stateDir"`
	Tunnels    []Tunnel      `json:"tunnels"`
	Rollback   Rollback      `json:"rollback"`
	Guardrails Guardrails    `json:"guardrails"`
	Approvals  Approvals     `json:"approvals"`
}

// Approvals is where the backend's pending approvals are and who is told
// of each new one.
type Approvals struct {
	// Dir is the backend's approvals directory (its policy.approvals.dir);
	// empty: approvals/ in backend.unit's StateDirectory.
	Dir string `json:"dir"`
	// Notify is the operator's notifier; none when its command is empty.
	Notify Notify `json:"notify"`
}

// Notify runs Command with Args (no shell) once per new pending
// approval, the approval's JSON on its stdin; each attempt is bounded by
// Timeout, and a failed one is tried again at most Retries times.
type Notify struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Timeout Duration `json:"timeout"`
	Retries int      `json:"retries"`
}

// Configured reports whether a notifier is set.
func (n Notify) Configured() bool { return n.Command != "" }

// ServiceConfig is one backend instance: its unit, listen address and the
// path of its mcp-backend config file.
type ServiceConfig struct {
	Unit   string `json:"unit"`
	Listen string `json:"listen"`
	Config string `json:"config"`
}

// Install says where releases live: <Root>/releases/<version>/ and the
// <Root>/current symlink.
type Install struct {
	Root         string `json:"root"`
	KeepReleases int    `json:"keepReleases"`
}

// Tunnel is one independently supervised tunnel unit. URL is its public
// address (used to verify it); Exec is the tunnel program's command line in
// systemd ExecStart syntax.
type Tunnel struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	URL  string `json:"url"`
	Exec string `json:"exec"`
}

// Rollback configures the automatic rollback armed by cutover.
type Rollback struct {
	Deadline Duration `json:"deadline"`
}

// Guardrails are the last-resort resource limits of the backend units.
// MemoryHigh and MemoryMax are systemd sizes ("6G", "512M", "infinity").
type Guardrails struct {
	TasksMax       int    `json:"tasksMax"`
	LimitNOFILE    int    `json:"limitNOFILE"`
	MemoryHigh     string `json:"memoryHigh"`
	MemoryMax      string `json:"memoryMax"`
	CPUWeight      int    `json:"cpuWeight"`
	TimeoutStopSec int    `json:"timeoutStopSec"`
	// SocketBacklog is Backlog= of the backend sockets: the connections
	// that may wait while the service restarts.
	SocketBacklog int `json:"socketBacklog"`
	// JobsMemoryMax and JobsTasksMax bound mcp-jobs.slice, every job
	// together; each job has its own smaller limits (the backend's
	// jobs.memoryMaxBytes and jobs.tasksMax).
	JobsMemoryMax string `json:"jobsMemoryMax"`
	JobsTasksMax  int    `json:"jobsTasksMax"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("120s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats whole seconds like "120s" (as operators write them), other
// durations like time.Duration does.
func (d Duration) String() string {
	if d%Duration(time.Second) == 0 {
		return strconv.FormatInt(int64(d/Duration(time.Second)), 10) + "s"
	}
	return time.Duration(d).String()
}

// MarshalJSON writes d as a string such as "120s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// durationError lets Parse name the key of a bad duration.
type durationError struct {
	value string
}

func (e *durationError) Error() string {
	return fmt.Sprintf("%s: not a duration (want e.g. \"120s\" or \"2m\")", e.value)
}

// UnmarshalJSON accepts a Go duration string such as "120s" or "2m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &durationError{value: string(b)}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &durationError{value: strconv.Quote(s)}
	}
	*d = Duration(v)
	return nil
}

// Default returns the documented defaults of every key.
func Default() *Config {
	return &Config{
		Backend:  ServiceConfig{Unit: "mcp-backend.service", Listen: "127.0.0.1:3210", Config: "/etc/mcp-backend/config.json"},
		Canary:   ServiceConfig{Unit: "mcp-backend-canary.service", Listen: "127.0.0.1:3211", Config: "/etc/mcp-backend/canary.json"},
		Install:  Install{Root: "/opt/mcp-backend", KeepReleases: 5},
		UnitDir:  "/etc/systemd/system",
		StateDir: "/var/lib/mcpctl",
		Tunnels: []Tunnel{
			{Name: "Overdeck", Unit: "mcp-tunnel-overdeck.service"},
			{Name: "overdeck-vm", Unit: "mcp-tunnel-overdeck-vm.service"},
		},
		Rollback: Rollback{Deadline: Duration(120 * time.Second)},
		Guardrails: Guardrails{
			TasksMax: 512, LimitNOFILE: 65536, MemoryHigh: "6G", MemoryMax: "9G", CPUWeight: 80, TimeoutStopSec: 5, SocketBacklog: units.SocketBacklog,
			JobsMemoryMax: "4G", JobsTasksMax: 4096,
		},
		Approvals: Approvals{Notify: Notify{Args: []string{}, Timeout: Duration(30 * time.Second), Retries: 3}},
	}
}

// Parse reads a config over the defaults: a missing key keeps its default, an
// unknown key is an error. A "tunnels" array replaces the default tunnels
// entirely. Parse does not validate; call Validate.
func Parse(r io.Reader) (*Config, error) {
	cfg := Default()
	def := cfg.Tunnels
	// A nil slice makes the decoder allocate fresh elements; decoding into the
	// default slice would merge a file's tunnel with the default at its index.
	cfg.Tunnels = nil
	data, err := strictjson.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read mcpctl config: %w", err)
	}
	if err := strictjson.Decode(data, cfg); err != nil {
		var de *durationError
		if errors.As(err, &de) {
			return nil, fmt.Errorf("%s = %w", badDurationKey(data), de)
		}
		return nil, fmt.Errorf("parse mcpctl config: %w", err)
	}
	if cfg.Tunnels == nil {
		cfg.Tunnels = def
	}
	return cfg, nil
}

// badDurationKey names the duration key of data that does not parse.
func badDurationKey(data []byte) string {
	var raw struct {
		Rollback struct {
			Deadline json.RawMessage `json:"deadline"`
		} `json:"rollback"`
		Approvals struct {
			Notify struct {
				Timeout json.RawMessage `json:"timeout"`
			} `json:"notify"`
		} `json:"approvals"`
	}
	_ = json.Unmarshal(data, &raw)
	var d Duration
	if t := raw.Approvals.Notify.Timeout; t != nil && d.UnmarshalJSON(t) != nil {
		return "approvals.notify.timeout"
	}
	return "rollback.deadline"
}

// Load reads and validates the config at path. explicit says the path was
// named by the operator (--config or MCPCTL_CONFIG): then a missing file is an
// error, while a missing file at the default path means all defaults.
func Load(path string, explicit bool) (*Config, error) {
	b, err := strictjson.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		cfg := Default()
		return cfg, cfg.Validate()
	case err != nil:
		return nil, fmt.Errorf("read mcpctl config: %w", err)
	}
	cfg, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// FixedUnits are the units mcpctl renders under fixed names besides the
// configured ones; configured unit names must not collide with them.
var FixedUnits = []string{
	"mcp-watchdog.service",
	"mcp-watchdog.timer",
	"mcpctl-pending-rollback.service",
	"mcpctl-rollback.service",
	"mcpctl-rollback.timer",
	"mcp-approvals-notify.service",
	"mcp-approvals-notify.path",
	"mcp-approvals-notify.timer",
}

// unitNameRE is a conservative subset of systemd unit names: no instances,
// no escaping (a backslash would be one more thing to quote in a unit file),
// only services, at most 255 bytes (systemd's limit).
var unitNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9:_.-]{0,246}\.service$`)

// MinMemory is the smallest memoryHigh/memoryMax accepted: below it the
// backend cannot hold its own runtime plus one response, and the Go memory
// limit derived from memoryHigh would round to nothing.
const MinMemory = 64 << 20

// Validate checks every value and reports all problems, each naming the key,
// the value and what is allowed. A tunnel's url and exec may be empty here
// (the defaults leave them empty); ValidateTunnels requires them.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	svc := func(key string, s ServiceConfig) {
		if !unitNameRE.MatchString(s.Unit) {
			add("%s.unit = %q: must be a unit name ending in .service", key, s.Unit)
		}
		if err := checkListen(s.Listen); err != nil {
			add("%s.listen = %q: %v", key, s.Listen, err)
		}
		if err := checkPath(s.Config); err != nil {
			add("%s.config = %q: %v", key, s.Config, err)
		}
	}
	svc("backend", c.Backend)
	svc("canary", c.Canary)
	if c.Backend.Listen == c.Canary.Listen {
		add("canary.listen = %q: must differ from backend.listen", c.Canary.Listen)
	}
	if c.Backend.Config == c.Canary.Config {
		add("canary.config = %q: must differ from backend.config", c.Canary.Config)
	}
	if err := checkPath(c.Install.Root); err != nil {
		add("install.root = %q: %v", c.Install.Root, err)
	}
	if c.Install.KeepReleases < 1 || c.Install.KeepReleases > 1000 {
		add("install.keepReleases = %d: must be 1..1000", c.Install.KeepReleases)
	}
	if err := checkPath(c.UnitDir); err != nil {
		add("unitDir = %q: %v", c.UnitDir, err)
	}
	if err := checkPath(c.StateDir); err != nil {
		add("stateDir = %q: %v", c.StateDir, err)
	}

	seen := map[string]string{}
	for _, u := range FixedUnits {
		seen[u] = "a unit of mcpctl itself"
	}
	dup := func(key, unit string) {
		if prev, ok := seen[unit]; ok {
			add("%s = %q: duplicate unit name (also %s)", key, unit, prev)
			return
		}
		seen[unit] = key
	}
	dup("backend.unit", c.Backend.Unit)
	dup("canary.unit", c.Canary.Unit)
	names := map[string]int{}
	for i, t := range c.Tunnels {
		key := fmt.Sprintf("tunnels[%d]", i)
		if strings.TrimSpace(t.Name) == "" {
			add("%s.name = %q: must not be empty", key, t.Name)
		} else if err := checkName(t.Name); err != nil {
			add("%s.name = %q: %v", key, t.Name, err)
		} else if j, ok := names[t.Name]; ok {
			add("%s.name = %q: duplicate tunnel name (also tunnels[%d])", key, t.Name, j)
		} else {
			names[t.Name] = i
		}
		if !unitNameRE.MatchString(t.Unit) {
			add("%s.unit = %q: must be a unit name ending in .service", key, t.Unit)
		} else {
			dup(key+".unit", t.Unit)
		}
		if t.URL != "" {
			if err := checkURL(t.URL); err != nil {
				add("%s.url = %q: %v", key, t.URL, err)
			}
		}
		if t.Exec != "" {
			if err := checkExec(t.Exec); err != nil {
				add("%s.exec = %q: %v", key, t.Exec, err)
			}
		}
	}

	if d := c.Rollback.Deadline.D(); d < time.Second || d > 24*time.Hour {
		add("rollback.deadline = %q: must be 1s..24h", c.Rollback.Deadline.String())
	}

	if a := c.Approvals; a.Dir != "" {
		if err := checkPath(a.Dir); err != nil {
			add("approvals.dir = %q: %v", a.Dir, err)
		}
	}
	if n := c.Approvals.Notify; n.Configured() {
		if !filepath.IsAbs(n.Command) || filepath.Clean(n.Command) != n.Command || hasControl(n.Command) {
			add("approvals.notify.command = %q: must be a clean absolute path to the program (no shell: put its arguments in args)", n.Command)
		}
		for i, a := range n.Args {
			if hasControl(a) {
				add("approvals.notify.args[%d] = %q: must not contain control characters", i, a)
			}
		}
		if len(n.Args) > 64 {
			add("approvals.notify.args = %d arguments: at most 64", len(n.Args))
		}
	}
	if d := c.Approvals.Notify.Timeout.D(); d < time.Second || d > 10*time.Minute {
		add("approvals.notify.timeout = %q: must be 1s..10m", c.Approvals.Notify.Timeout.String())
	}
	if r := c.Approvals.Notify.Retries; r < 0 || r > 10 {
		add("approvals.notify.retries = %d: must be 0..10", r)
	}

	g := c.Guardrails
	if g.TasksMax < 16 || g.TasksMax > 4194304 {
		add("guardrails.tasksMax = %d: must be 16..4194304", g.TasksMax)
	}
	if g.LimitNOFILE < 1024 || g.LimitNOFILE > 1048576 {
		add("guardrails.limitNOFILE = %d: must be 1024..1048576", g.LimitNOFILE)
	}
	if g.CPUWeight < 1 || g.CPUWeight > 10000 {
		add("guardrails.cpuWeight = %d: must be 1..10000", g.CPUWeight)
	}
	// The backend drains HTTP for up to 2 s at SIGTERM, then answers the
	// calls still running and ends their commands: 3 s at the least.
	if g.TimeoutStopSec < 3 || g.TimeoutStopSec > 600 {
		add("guardrails.timeoutStopSec = %d: must be 3..600 (the backend drains for up to 2 s before it ends running calls)", g.TimeoutStopSec)
	}
	if g.SocketBacklog < 16 || g.SocketBacklog > 65535 {
		add("guardrails.socketBacklog = %d: must be 16..65535 (the kernel caps it at net.core.somaxconn)", g.SocketBacklog)
	}
	high, errHigh := units.ParseSize(g.MemoryHigh)
	if errHigh != nil {
		add("guardrails.memoryHigh = %q: %v", g.MemoryHigh, errHigh)
	}
	max, errMax := units.ParseSize(g.MemoryMax)
	if errMax != nil {
		add("guardrails.memoryMax = %q: %v", g.MemoryMax, errMax)
	}
	if errHigh == nil && high < MinMemory {
		add("guardrails.memoryHigh = %q: must be at least 64M (or infinity)", g.MemoryHigh)
	}
	if errMax == nil && max < MinMemory {
		add("guardrails.memoryMax = %q: must be at least 64M (or infinity)", g.MemoryMax)
	}
	if errHigh == nil && errMax == nil && high > max {
		add("guardrails.memoryHigh = %q: must not be above guardrails.memoryMax = %q", g.MemoryHigh, g.MemoryMax)
	}
	if jm, err := units.ParseSize(g.JobsMemoryMax); err != nil {
		add("guardrails.jobsMemoryMax = %q: %v", g.JobsMemoryMax, err)
	} else if jm < MinMemory {
		add("guardrails.jobsMemoryMax = %q: must be at least 64M (or infinity)", g.JobsMemoryMax)
	}
	if g.JobsTasksMax < 16 || g.JobsTasksMax > 4194304 {
		add("guardrails.jobsTasksMax = %d: must be 16..4194304", g.JobsTasksMax)
	}
	return errors.Join(errs...)
}

// ValidateTunnels checks what deploying the tunnels needs beyond Validate:
// every tunnel has a url (to verify it) and an exec (to run it). Rendering
// units and cutover call it; commands that never touch tunnels need not.
func (c *Config) ValidateTunnels() error {
	var errs []error
	for i, t := range c.Tunnels {
		if t.URL == "" {
			errs = append(errs, fmt.Errorf("tunnels[%d].url = \"\": must be the tunnel's http(s) URL (tunnel %q)", i, t.Name))
		}
		if strings.TrimSpace(t.Exec) == "" {
			errs = append(errs, fmt.Errorf("tunnels[%d].exec = %q: must be the tunnel program's command line (tunnel %q)", i, t.Exec, t.Name))
		}
	}
	return errors.Join(errs...)
}

// Unknown keys are caught by the decoder; these check shapes.

// checkListen accepts exactly IP:PORT as netip writes it (e.g.
// 127.0.0.1:3210 or [::1]:3210) with a port 1..65535: the address goes into
// ExecStart and URLs, where a host name, a zone or a space would be one more
// thing to trust. net.SplitHostPort alone accepts newlines and spaces.
func checkListen(s string) error {
	const want = "must be IP:PORT with an IP address and a port 1..65535, e.g. 127.0.0.1:3210"
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 || ap.String() != s {
		return errors.New(want)
	}
	return nil
}

// hasControl reports control characters (C0, DEL, C1) or invalid UTF-8: none
// may reach a unit file, where a newline starts a new directive.
func hasControl(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) })
}

func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case !filepath.IsAbs(p):
		return errors.New("must be an absolute path")
	case hasControl(p):
		return errors.New("must not contain control characters")
	case strings.ContainsFunc(p, unicode.IsSpace) || strings.ContainsAny(p, "\"'\\%$;"):
		return errors.New("must not contain whitespace, quotes, backslashes, %, $ or ;")
	case filepath.Clean(p) != p:
		return fmt.Errorf("must be a clean path (%s)", filepath.Clean(p))
	}
	return nil
}

// checkName: a tunnel name is free text in a unit's Description and in
// reports; printable, one line, at most 100 characters.
func checkName(s string) error {
	switch {
	case hasControl(s):
		return errors.New("must not contain control characters")
	case strings.TrimSpace(s) != s || strings.Contains(s, "  "):
		return errors.New("must not have leading, trailing or repeated spaces")
	case utf8.RuneCountInString(s) > 100:
		return errors.New("must be at most 100 characters")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must be printable (has %U)", r)
		}
	}
	return nil
}

// checkExec: the tunnel's command line in ExecStart syntax. It is the
// operator's own, so it is not quoted; it must still be one line that starts
// with an absolute program path and cannot continue onto another line.
func checkExec(s string) error {
	if hasControl(s) {
		return errors.New("must be a single line without control characters")
	}
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, `\`) {
		return errors.New("must not end in a backslash (it would continue the line)")
	}
	prog, _, _ := strings.Cut(s, " ")
	if err := checkPath(prog); err != nil {
		return fmt.Errorf("must start with the program's absolute path (%q: %v)", prog, err)
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || hasControl(s) ||
		strings.ContainsFunc(s, unicode.IsSpace) || u.User != nil {
		return errors.New("must be an http:// or https:// URL with a host (no spaces, no credentials)")
	}
	if _, err := strconv.ParseUint(u.Port(), 10, 16); u.Port() != "" && err != nil {
		return errors.New("must be an http:// or https:// URL with a port 1..65535, if any")
	}
	return nil
}
