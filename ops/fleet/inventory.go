// Package fleet rolls one mcp-backend build out to many hosts in waves: the
// inventory (mcpctl-fleet.json), the pure planners (waves from host facts,
// what to do after a wave, what a resumed run has left), the append-only run
// log with its lock, and a small executor that drives each host's own mcpctl
// through a Remote the caller supplies (the SSH runner in ops/fleet/sshrun).
// Each host keeps its own armed rollback: the fleet never replaces it, it
// only decides which hosts go next and which to take back.
package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/strictjson"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/units/hostlayout"
)

// DefaultPath is the inventory mcpctl fleet reads when none is named.
const DefaultPath = "mcpctl-fleet.json"

// Inventory is mcpctl-fleet.json. Every key but hosts is optional; Default
// holds what a missing key keeps. Relative paths (ssh.knownHosts,
// ssh.identity) are relative to the inventory's directory.
type Inventory struct {
	Hosts    []Host   `json:"hosts"`
	Defaults HostDefs `json:"defaults"`
	SSH      SSH      `json:"ssh"`
	Rollout  Rollout  `json:"rollout"`

	// Path is the inventory file, absolute (set by Load); the run log and
	// the lock live beside it.
	Path string `json:"-"`
}

// Host is one host of the fleet. Empty fields take defaults.*.
type Host struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"`
	User    string `json:"user,omitempty"`
	// Config is the host's mcpctl.json.
	Config string `json:"config,omitempty"`
	// Agent is an mcpctl already on the host (the one `mcpctl install`
	// ran); it only receives the uploads. Every other step runs the
	// uploaded mcpctl of the controller's own build.
	Agent string `json:"agent,omitempty"`
	// FleetDir holds the uploads (content-addressed, never overwritten) and
	// the outcome of every remote step.
	FleetDir string `json:"fleetDir,omitempty"`
}

// HostDefs are the values a host without its own takes.
type HostDefs struct {
	Port     int    `json:"port"`
	User     string `json:"user"`
	Config   string `json:"config"`
	Agent    string `json:"agent"`
	FleetDir string `json:"fleetDir"`
}

// SSH configures the OpenSSH client.
type SSH struct {
	// Binary is the ssh client; "ssh" from PATH by default.
	Binary string `json:"binary"`
	// KnownHosts is the only known_hosts file consulted (strict checking,
	// never updated): an unknown or changed key stops the run.
	KnownHosts string `json:"knownHosts"`
	// Identity is the private key, the only one offered (IdentitiesOnly,
	// no agent).
	Identity            string             `json:"identity"`
	ConnectTimeout      ctlconfig.Duration `json:"connectTimeout"`
	ServerAliveInterval ctlconfig.Duration `json:"serverAliveInterval"`
	// ControlPersist bounds how long the one multiplexed connection per
	// host stays open after its last use.
	ControlPersist ctlconfig.Duration `json:"controlPersist"`
}

// Rollout is the policy of a rollout.
type Rollout struct {
	// Waves are batch sizes: a count or a percentage of the fleet (rounded
	// up, at least 1); the last one repeats until every host has a wave.
	Waves       []WaveSize         `json:"waves"`
	Parallelism int                `json:"parallelism"`
	MaxFailures int                `json:"maxFailures"`
	Pause       ctlconfig.Duration `json:"pause"`
	// OnFailure is what happens to the earlier waves when a wave fails
	// beyond maxFailures: revert (roll this run's hosts back) or halt.
	OnFailure string `json:"onFailure"`
	// Stress is the stress run against each host's canary.
	Stress StressPolicy `json:"stress"`
	// StepTimeout bounds each remote step (the controller's wait, not the
	// step: a step outlives the controller).
	StepTimeout ctlconfig.Duration `json:"stepTimeout"`
}

// StressPolicy is the canary stress of each host. Several hosts stress
// their canaries at once, each on a machine that may be small and busy: the
// defaults make the verdicts hold there (shell commands long enough that
// the shell limit is reached even when starts are late, a control-call
// bound that proves answers, not speed).
type StressPolicy struct {
	Profile  string             `json:"profile"`
	Duration ctlconfig.Duration `json:"duration"`
	// ShellSleep is how long each offered shell.exec sleeps.
	ShellSleep ctlconfig.Duration `json:"shellSleep"`
	// ControlP99 bounds the p99 latency of control calls.
	ControlP99 ctlconfig.Duration `json:"controlP99"`
}

// Args are the `mcpctl stress` arguments of the policy.
func (p StressPolicy) Args() []string {
	return []string{"--profile", p.Profile, "--duration", p.Duration.String(),
		"--shell-sleep", p.ShellSleep.String(), "--control-p99", p.ControlP99.String()}
}

// Failure policies.
const (
	Revert = "revert"
	Halt   = "halt"
)

// WaveSize is a batch size: Count hosts, or Percent of the fleet.
type WaveSize struct {
	Count   int
	Percent float64
}

// UnmarshalJSON accepts 3 or "25%".
func (w *WaveSize) UnmarshalJSON(b []byte) error {
	var n json.Number
	// json.Number also takes a quoted number: "25" is neither form.
	if err := json.Unmarshal(b, &n); err == nil && !bytes.HasPrefix(b, []byte(`"`)) {
		i, err := strconv.Atoi(n.String())
		if err != nil {
			return fmt.Errorf("%s: want a whole number of hosts or a percentage like \"25%%\"", b)
		}
		*w = WaveSize{Count: i}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: want a number of hosts or a percentage like \"25%%\"", b)
	}
	p, ok := strings.CutSuffix(s, "%")
	f, err := strconv.ParseFloat(p, 64)
	if !ok || err != nil || math.IsNaN(f) {
		return fmt.Errorf("%q: want a number of hosts or a percentage like \"25%%\"", s)
	}
	*w = WaveSize{Percent: f}
	return nil
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (w WaveSize) MarshalJSON() ([]byte, error) {
	if w.Percent != 0 {
		return json.Marshal(strconv.FormatFloat(w.Percent, 'f', -1, 64) + "%")
	}
	return json.Marshal(w.Count)
}

func (w WaveSize) String() string {
	b, _ := w.MarshalJSON()
	return string(b)
}

// Of is the batch size in a fleet of n hosts: percentages rounded up, at
// least 1.
func (w WaveSize) Of(n int) int {
	if w.Percent != 0 {
		return max(1, int(math.Ceil(w.Percent*float64(n)/100-1e-9)))
	}
	return w.Count
}

// Default returns the documented defaults of every key.
func Default() *Inventory {
	return &Inventory{
		Defaults: HostDefs{
			Port: 22, User: "root", Config: ctlconfig.DefaultPath,
			Agent: "/usr/local/bin/mcpctl", FleetDir: hostlayout.MCPCtlFleetDir,
		},
		SSH: SSH{
			Binary: "ssh", KnownHosts: "known_hosts", Identity: "id_fleet",
			ConnectTimeout:      ctlconfig.Duration(10 * time.Second),
			ServerAliveInterval: ctlconfig.Duration(5 * time.Second),
			ControlPersist:      ctlconfig.Duration(60 * time.Second),
		},
		Rollout: Rollout{
			Waves:       []WaveSize{{Count: 1}, {Percent: 25}, {Percent: 100}},
			Parallelism: 4, MaxFailures: 0, OnFailure: Revert,
			Stress: StressPolicy{Profile: "overload", Duration: ctlconfig.Duration(5 * time.Second),
				ShellSleep: ctlconfig.Duration(2 * time.Second), ControlP99: ctlconfig.Duration(5 * time.Second)},
			StepTimeout: ctlconfig.Duration(10 * time.Minute),
		},
	}
}

// Parse reads an inventory over the defaults; unknown keys are errors.
// Parse does not validate; call Validate.
func Parse(r io.Reader) (*Inventory, error) {
	inv := Default()
	waves := inv.Rollout.Waves
	inv.Rollout.Waves = nil
	data, err := strictjson.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read fleet inventory: %w", err)
	}
	if err := strictjson.Decode(data, inv); err != nil {
		return nil, fmt.Errorf("parse fleet inventory: %w", err)
	}
	if inv.Rollout.Waves == nil {
		inv.Rollout.Waves = waves
	}
	return inv, nil
}

// Load reads, resolves and validates the inventory at path.
func Load(path string) (*Inventory, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("fleet inventory %q: %w", path, err)
	}
	b, err := strictjson.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("read fleet inventory: %w", err)
	}
	inv, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	inv.Path = abs
	inv.resolve()
	if err := inv.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	return inv, nil
}

// resolve fills each host's empty fields from defaults and makes the local
// paths absolute against the inventory's directory.
func (inv *Inventory) resolve() {
	dir := filepath.Dir(inv.Path)
	for i := range inv.Hosts {
		h := &inv.Hosts[i]
		if h.Port == 0 {
			h.Port = inv.Defaults.Port
		}
		h.User = or(h.User, inv.Defaults.User)
		h.Config = or(h.Config, inv.Defaults.Config)
		h.Agent = or(h.Agent, inv.Defaults.Agent)
		h.FleetDir = or(h.FleetDir, inv.Defaults.FleetDir)
	}
	for _, p := range []*string{&inv.SSH.KnownHosts, &inv.SSH.Identity} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var (
	// hostNameRE: a host's name becomes part of unit names, step ids and
	// file names on the host.
	hostNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// dnsNameRE: a DNS name or IPv4 literal; never starts with '-', so it
	// cannot be read as an option.
	dnsNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$`)
	userRE    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	// remotePathRE: paths that reach the remote command line, which the
	// remote shell splits into words: nothing it would interpret.
	remotePathRE = regexp.MustCompile(`^(/[A-Za-z0-9._+-]+)+$`)
	// localPathRE: ssh splits UserKnownHostsFile at whitespace and expands
	// % and ~ in both paths; none of those may appear.
	localPathRE = regexp.MustCompile(`^/[A-Za-z0-9._+/-]*$`)
)

// Validate checks every value and reports all problems, each naming the
// key, the value and what is allowed.
func (inv *Inventory) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(inv.Hosts) == 0 {
		add("hosts: at least one host is needed")
	}
	seenName, seenAddr := map[string]int{}, map[string]int{}
	for i, h := range inv.Hosts {
		k := fmt.Sprintf("hosts[%d]", i)
		if !hostNameRE.MatchString(h.Name) {
			add("%s.name = %q: want 1-63 of a-z 0-9 _ -, starting with a letter or digit", k, h.Name)
		} else if j, dup := seenName[h.Name]; dup {
			add("%s.name = %q: also the name of hosts[%d]", k, h.Name, j)
		}
		seenName[h.Name] = i
		if err := checkAddress(h.Address); err != nil {
			add("%s.address = %q: %v", k, h.Address, err)
		}
		dest := fmt.Sprintf("%s:%d", h.Address, h.Port)
		if j, dup := seenAddr[dest]; dup {
			add("%s: address %s is also hosts[%d]'s: each host once", k, dest, j)
		}
		seenAddr[dest] = i
		if h.Port < 1 || h.Port > 65535 {
			add("%s.port = %d: want 1..65535", k, h.Port)
		}
		if !userRE.MatchString(h.User) {
			add("%s.user = %q: want a user name (a-z 0-9 _ -, at most 32)", k, h.User)
		}
		for _, f := range []struct{ key, v string }{{"config", h.Config}, {"agent", h.Agent}, {"fleetDir", h.FleetDir}} {
			if err := CheckRemotePath(f.v); err != nil {
				add("%s.%s = %q: %v", k, f.key, f.v, err)
			}
		}
	}
	if inv.SSH.Binary == "" || strings.ContainsFunc(inv.SSH.Binary, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		add("ssh.binary = %q: want a program name or path", inv.SSH.Binary)
	}
	if err := checkLocalPath(inv.SSH.KnownHosts); err != nil {
		add("ssh.knownHosts = %q: %v", inv.SSH.KnownHosts, err)
	}
	// One key, named: IdentitiesOnly offers it and nothing else (no agent
	// key, no default key file).
	if err := checkLocalPath(inv.SSH.Identity); err != nil {
		add("ssh.identity = %q: %v", inv.SSH.Identity, err)
	}
	secs := func(key string, d ctlconfig.Duration, lo, hi time.Duration) {
		if d.D() < lo || d.D() > hi || d.D()%time.Second != 0 {
			add("%s = %s: want whole seconds from %s to %s", key, d, lo, hi)
		}
	}
	secs("ssh.connectTimeout", inv.SSH.ConnectTimeout, time.Second, 5*time.Minute)
	secs("ssh.serverAliveInterval", inv.SSH.ServerAliveInterval, time.Second, 5*time.Minute)
	secs("ssh.controlPersist", inv.SSH.ControlPersist, time.Second, time.Hour)

	r := inv.Rollout
	if len(r.Waves) == 0 {
		add("rollout.waves: at least one batch size, e.g. [1, \"25%%\", \"100%%\"]")
	}
	for i, w := range r.Waves {
		if (w.Percent != 0 && (w.Percent <= 0 || w.Percent > 100)) || (w.Percent == 0 && w.Count < 1) {
			add("rollout.waves[%d] = %s: want a count of at least 1 or a percentage in (0, 100]", i, w)
		}
	}
	if r.Parallelism < 1 || r.Parallelism > 64 {
		add("rollout.parallelism = %d: want 1..64 (sshd's MaxStartups bounds parallel logins)", r.Parallelism)
	}
	if r.MaxFailures < 0 {
		add("rollout.maxFailures = %d: want 0 or more", r.MaxFailures)
	}
	if r.Pause.D() < 0 || r.Pause.D() > 24*time.Hour {
		add("rollout.pause = %s: want 0s..24h", r.Pause)
	}
	if r.OnFailure != Revert && r.OnFailure != Halt {
		add("rollout.onFailure = %q: want %q or %q", r.OnFailure, Revert, Halt)
	}
	// mcpctl stress's profiles that run against a canary.
	if r.Stress.Profile != "overload" && r.Stress.Profile != "spike" {
		add("rollout.stress.profile = %q: want \"overload\" or \"spike\" (against the canary)", r.Stress.Profile)
	}
	secs("rollout.stress.duration", r.Stress.Duration, time.Second, 10*time.Minute)
	for _, d := range []struct {
		key string
		v   ctlconfig.Duration
	}{{"rollout.stress.shellSleep", r.Stress.ShellSleep}, {"rollout.stress.controlP99", r.Stress.ControlP99}} {
		if d.v.D() < 100*time.Millisecond || d.v.D() > time.Minute || d.v.D()%time.Millisecond != 0 {
			add("%s = %s: want whole milliseconds from 100ms to 1m", d.key, d.v)
		}
	}
	secs("rollout.stepTimeout", r.StepTimeout, 10*time.Second, 24*time.Hour)
	return errors.Join(errs...)
}

func checkAddress(a string) error {
	if ip, err := netip.ParseAddr(a); err == nil {
		if ip.Zone() != "" {
			return errors.New("want an address without a zone")
		}
		return nil
	}
	if len(a) > 253 || !dnsNameRE.MatchString(a) {
		return errors.New("want a DNS name or an IP address")
	}
	return nil
}

// CheckRemotePath accepts an absolute, clean path of letters, digits and
// . _ + - only: such a path is one word on any remote shell's command line.
func CheckRemotePath(p string) error {
	switch {
	case !remotePathRE.MatchString(p):
		return errors.New("want an absolute path of letters, digits and . _ + - (one shell word)")
	case filepath.Clean(p) != p || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return fmt.Errorf("want a clean path (%s)", filepath.Clean(p))
	}
	return nil
}

func checkLocalPath(p string) error {
	switch {
	case !localPathRE.MatchString(p):
		return errors.New("want a path of letters, digits and . _ + - / (ssh expands % and ~ and splits at whitespace)")
	case filepath.Clean(p) != p:
		return fmt.Errorf("want a clean path (%s)", filepath.Clean(p))
	}
	return nil
}

// Host returns the host called name.
func (inv *Inventory) Host(name string) (*Host, bool) {
	for i := range inv.Hosts {
		if inv.Hosts[i].Name == name {
			return &inv.Hosts[i], true
		}
	}
	return nil, false
}

// LogPath is the append-only run log beside the inventory.
func (inv *Inventory) LogPath() string {
	return strings.TrimSuffix(inv.Path, filepath.Ext(inv.Path)) + ".runs.jsonl"
}

// LockPath is the lock of the one fleet run at a time, beside the log.
func (inv *Inventory) LockPath() string {
	return strings.TrimSuffix(inv.Path, filepath.Ext(inv.Path)) + ".lock"
}
