// Package config holds mcp-backend's configuration:
// Default() -> Parse(io.Reader) -> Validate(). Every key is optional, unknown
// keys are errors, and a file without "concurrency" gets the spec defaults.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/backend/filepolicy"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/internal/strictjson"
)

// Config is the whole backend configuration file.
type Config struct {
	Listen       string   `json:"listen"`
	AllowedHosts []string `json:"allowedHosts"`
	// AllowedOrigins are browser origins (scheme://host[:port], exact)
	// accepted besides loopback and allowedHosts ones: a hosted or
	// browser-based client's page.
	AllowedOrigins []string    `json:"allowedOrigins"`
	Auth           Auth        `json:"auth"`
	Concurrency    Concurrency `json:"concurrency"`
	Limits         Limits      `json:"limits"`
	Shell          Shell       `json:"shell"`
	Files          Files       `json:"files"`
	Audit          Audit       `json:"audit"`
	Jobs           Jobs        `json:"jobs"`
	// Policy decides, before a tool runs, which calls are allowed, asked
	// about or refused (backend/policy). Default: no rules, allow.
	Policy policy.Config `json:"policy"`
	// Sandbox names the profiles shell commands run in (backend/sandbox)
	// and each action's default. Default: no sandbox.
	Sandbox sandbox.Config `json:"sandbox"`

	// Path is the file the config was loaded from (absolute; "" when
	// parsed from elsewhere): one of the backend's own secrets, which the
	// file tools refuse.
	Path string `json:"-"`
}

// Files is the path policy of file.read, file.write and file.list, checked
// on the canonical path of what a call opened (symlinks, .., /proc/self/fd
// and hard links resolved). It applies to every principal; for one without
// shell.exec it is a real boundary. The backend's own secrets (token file,
// config file, state directories, process memory) are refused whatever it
// says.
type Files struct {
	// Roots are the trees the file tools may use. Default ["/"].
	Roots []string `json:"roots"`
	// Deny are path patterns refused below the roots: absolute, each
	// component a glob (*, ?, [...]), "**" any number of components; a
	// pattern refuses what it matches and everything below it. Setting it
	// replaces the defaults (DefaultDeny), so a list that adds to them
	// repeats them.
	Deny []string `json:"deny"`
}

// DefaultDeny is files.deny of a config that sets none: the host's
// credentials, other processes' environment, the fleet's keys, and the
// files whose read changes the host (it consumes what other readers wait
// for: the kernel log of /proc/kmsg, the trace pipes).
func DefaultDeny() []string {
	return []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
		"/etc/ssh/ssh_host_*_key",
		"/**/.ssh/id_dsa", "/**/.ssh/id_ecdsa", "/**/.ssh/id_ecdsa_sk",
		"/**/.ssh/id_ed25519", "/**/.ssh/id_ed25519_sk", "/**/.ssh/id_rsa", "/**/.ssh/id_xmss",
		"/etc/mcpctl", "/etc/ssl/private", "/etc/letsencrypt",
		"/proc/*/environ", "/proc/*/task/*/environ",
		"/proc/kmsg", "/sys/kernel/tracing/**/trace_pipe*", "/sys/kernel/debug/tracing/**/trace_pipe*",
	}
}

// Auth configures access to /mcp: the operator's static bearer token, and
// OAuth for hosted connectors (nil: off). Either, both or neither.
type Auth struct {
	BearerTokenFile string `json:"bearerTokenFile"`
	OAuth           *OAuth `json:"oauth,omitempty"`
}

// Concurrency holds the admission limits.
type Concurrency struct {
	MaxActive       int `json:"maxActive"`
	ReservedControl int `json:"reservedControl"`
	MaxShell        int `json:"maxShell"`
	MaxQueue        int `json:"maxQueue"`
	QueueWaitMs     int `json:"queueWaitMs"`
	// FlowReserve slots of each class stay for a caller holding nothing
	// there: no conversation alone fills a class (fair share).
	FlowReserve int `json:"flowReserve"`
	// MaxFlows bounds the conversations (and principals) tracked for fair
	// share; beyond it new ones share buckets.
	MaxFlows int `json:"maxFlows"`
	// FlowIdleMs: how long an idle flow's service history is kept.
	FlowIdleMs int `json:"flowIdleMs"`
}

// MaxNonControl is the capacity left to non-control work.
func (c Concurrency) MaxNonControl() int { return c.MaxActive - c.ReservedControl }

// QueueWait is QueueWaitMs as a duration.
func (c Concurrency) QueueWait() time.Duration {
	return time.Duration(c.QueueWaitMs) * time.Millisecond
}

// Limits bounds what one operation may return.
type Limits struct {
	OutputBytes   int64 `json:"outputBytes"`
	ResponseBytes int64 `json:"responseBytes"`
}

// Shell configures shell.exec.
type Shell struct {
	Path             string `json:"path"`
	DefaultTimeoutMs int    `json:"defaultTimeoutMs"`
	MaxTimeoutMs     int    `json:"maxTimeoutMs"`
}

// Default returns the configuration with every default of the spec.
func Default() Config {
	return Config{
		Listen:         "127.0.0.1:3210",
		AllowedHosts:   []string{},
		AllowedOrigins: []string{},
		Concurrency: Concurrency{
			MaxActive:       48,
			ReservedControl: 8,
			MaxShell:        8,
			MaxQueue:        64,
			QueueWaitMs:     30000,
			FlowReserve:     1,
			MaxFlows:        1024,
			FlowIdleMs:      300000,
		},
		Limits:  Limits{OutputBytes: 4 << 20, ResponseBytes: 6 << 20},
		Shell:   Shell{Path: "/bin/bash", DefaultTimeoutMs: 60000, MaxTimeoutMs: 600000},
		Files:   Files{Roots: []string{"/"}, Deny: DefaultDeny()},
		Audit:   DefaultAudit(),
		Jobs:    DefaultJobs(),
		Policy:  policy.Default(),
		Sandbox: sandbox.Default(),
	}
}

// Parse reads a JSON config over the defaults. Keys that are absent keep
// their default; unknown keys and trailing data are errors.
func Parse(r io.Reader) (Config, error) {
	c := Default()
	data, err := strictjson.ReadAll(r)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if err := strictjson.Decode(data, &c); err != nil {
		return c, fmt.Errorf("config: %w", describeJSONError(err))
	}
	if c.AllowedHosts == nil {
		c.AllowedHosts = []string{}
	}
	if c.AllowedOrigins == nil {
		c.AllowedOrigins = []string{}
	}
	if c.Files.Roots == nil {
		c.Files.Roots = []string{}
	}
	if c.Files.Deny == nil {
		c.Files.Deny = []string{}
	}
	if c.Policy.Rules == nil {
		c.Policy.Rules = []policy.Rule{}
	}
	if c.Sandbox.Profiles == nil {
		c.Sandbox.Profiles = map[string]sandbox.Profile{}
	}
	if o := c.Auth.OAuth; o != nil && o.Scopes == nil {
		o.Scopes = DefaultScopes()
	}
	return c, nil
}

// Load reads, parses and validates the file at path.
func Load(path string) (Config, error) {
	b, err := strictjson.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(bytes.NewReader(b))
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if c.Path, err = filepath.Abs(path); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func describeJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: wrong type %s, want %s", te.Field, te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
	}
	// DisallowUnknownFields reports `json: unknown field "x"`.
	if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
		return fmt.Errorf("unknown key %s (valid keys: listen, allowedHosts, allowedOrigins, auth, concurrency, limits, shell, files, audit, jobs, policy and their documented sub-keys)", strings.TrimPrefix(s, "json: unknown field "))
	}
	return err
}

// responseHeadroom is what a response needs besides a tool's output.
const responseHeadroom = 64 << 10

// maxLimit bounds maxActive and maxQueue: the admission controller packs its
// gauges into 12-bit fields.
const maxLimit = 4095

// Upper bounds of the values the program turns into durations and buffers.
// Below time.Duration's range (~292 years) by far; above any sane setting.
const (
	// maxQueueWaitMs: a call queued longer than an hour has no client left.
	maxQueueWaitMs = 3600000
	// maxFlows bounds the fair-share flow table (a few hundred bytes each).
	maxFlows = 1 << 16
	// maxShellTimeoutMs: a day; shell.exec is not a job scheduler.
	maxShellTimeoutMs = 86400000
	// maxOutputBytes: file.read allocates this per call and JSON escaping
	// makes the response up to six times larger, times maxActive calls.
	maxOutputBytes = 64 << 20
	// maxResponseBytes leaves outputBytes its headroom at the top.
	maxResponseBytes = maxOutputBytes + 64<<20
)

// Validate checks every value and returns an error naming the first bad key,
// its value and what is allowed.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("%s = %v: %s", key, val, want))
	}
	if err := checkListen(c.Listen); err != nil {
		bad("listen", fmt.Sprintf("%q", c.Listen), err.Error())
	}
	for i, h := range c.AllowedHosts {
		if !isHost(h) {
			bad(fmt.Sprintf("allowedHosts[%d]", i), fmt.Sprintf("%q", h), "must be a host name such as mcp.example.com")
		}
	}
	for i, o := range c.AllowedOrigins {
		if !isOrigin(o) {
			bad(fmt.Sprintf("allowedOrigins[%d]", i), fmt.Sprintf("%q", o), "must be an origin scheme://host[:port] such as https://claude.ai (http or https, no path, no trailing slash)")
		}
	}
	if f := c.Auth.BearerTokenFile; f != "" {
		if err := checkPath(f); err != nil {
			bad("auth.bearerTokenFile", fmt.Sprintf("%q", f), err.Error())
		}
	}
	if c.Auth.OAuth != nil {
		errs = append(errs, c.Auth.OAuth.validate()...)
	}
	cc := c.Concurrency
	if cc.MaxActive <= 0 || cc.MaxActive > maxLimit {
		bad("concurrency.maxActive", cc.MaxActive, "must be 1..4095")
	}
	if cc.ReservedControl <= 0 {
		bad("concurrency.reservedControl", cc.ReservedControl, "must be > 0")
	} else if cc.MaxActive > 0 && cc.ReservedControl >= cc.MaxActive {
		bad("concurrency.reservedControl", cc.ReservedControl, fmt.Sprintf("must be < maxActive (%d)", cc.MaxActive))
	}
	if cc.MaxShell <= 0 {
		bad("concurrency.maxShell", cc.MaxShell, "must be > 0")
	} else if cc.MaxActive > cc.ReservedControl && cc.MaxShell > cc.MaxNonControl() {
		bad("concurrency.maxShell", cc.MaxShell, fmt.Sprintf("must be <= maxActive - reservedControl (%d)", cc.MaxNonControl()))
	}
	if cc.MaxQueue < 0 || cc.MaxQueue > maxLimit {
		bad("concurrency.maxQueue", cc.MaxQueue, "must be 0..4095")
	}
	if cc.QueueWaitMs <= 0 || cc.QueueWaitMs > maxQueueWaitMs {
		bad("concurrency.queueWaitMs", cc.QueueWaitMs, fmt.Sprintf("must be 1..%d (1 h)", maxQueueWaitMs))
	}
	if cc.FlowReserve < 0 || cc.FlowReserve > 16 {
		bad("concurrency.flowReserve", cc.FlowReserve, "must be 0..16 (each class keeps at most its size - 1; 0 turns the fair-share reserve off)")
	}
	if cc.MaxFlows < 1 || cc.MaxFlows > maxFlows {
		bad("concurrency.maxFlows", cc.MaxFlows, fmt.Sprintf("must be 1..%d", maxFlows))
	}
	if cc.FlowIdleMs < 1000 || cc.FlowIdleMs > 86400000 {
		bad("concurrency.flowIdleMs", cc.FlowIdleMs, "must be 1000..86400000 (1 s to 1 day)")
	}
	outputOK := c.Limits.OutputBytes > 0 && c.Limits.OutputBytes <= maxOutputBytes
	if !outputOK {
		bad("limits.outputBytes", c.Limits.OutputBytes, fmt.Sprintf("must be 1..%d (64 MiB)", maxOutputBytes))
	}
	if c.Limits.ResponseBytes <= 0 || c.Limits.ResponseBytes > maxResponseBytes {
		bad("limits.responseBytes", c.Limits.ResponseBytes, fmt.Sprintf("must be 1..%d (128 MiB)", maxResponseBytes))
	} else if outputOK && c.Limits.ResponseBytes < c.Limits.OutputBytes+responseHeadroom {
		// A result adds fields and an envelope around its output.
		bad("limits.responseBytes", c.Limits.ResponseBytes, fmt.Sprintf("must be >= limits.outputBytes + %d (%d)", responseHeadroom, c.Limits.OutputBytes+responseHeadroom))
	}
	if err := checkPath(c.Shell.Path); err != nil {
		bad("shell.path", fmt.Sprintf("%q", c.Shell.Path), err.Error()+" such as /bin/bash")
	}
	if c.Shell.DefaultTimeoutMs <= 0 || c.Shell.DefaultTimeoutMs > maxShellTimeoutMs {
		bad("shell.defaultTimeoutMs", c.Shell.DefaultTimeoutMs, fmt.Sprintf("must be 1..%d (24 h)", maxShellTimeoutMs))
	}
	if c.Shell.MaxTimeoutMs <= 0 || c.Shell.MaxTimeoutMs > maxShellTimeoutMs {
		bad("shell.maxTimeoutMs", c.Shell.MaxTimeoutMs, fmt.Sprintf("must be 1..%d (24 h)", maxShellTimeoutMs))
	} else if c.Shell.DefaultTimeoutMs > c.Shell.MaxTimeoutMs {
		bad("shell.defaultTimeoutMs", c.Shell.DefaultTimeoutMs, fmt.Sprintf("must be <= shell.maxTimeoutMs (%d)", c.Shell.MaxTimeoutMs))
	}
	if len(c.Files.Roots) == 0 {
		bad("files.roots", "[]", `must name at least one directory the file tools may use, e.g. ["/"] (the default) or ["/srv", "/var/log"]`)
	}
	for i, r := range c.Files.Roots {
		if err := checkPath(r); err != nil {
			bad(fmt.Sprintf("files.roots[%d]", i), fmt.Sprintf("%q", r), err.Error()+" such as /srv")
		}
	}
	for i, d := range c.Files.Deny {
		if why := filepolicy.ValidPattern(d); why != "" {
			bad(fmt.Sprintf("files.deny[%d]", i), fmt.Sprintf("%q", d), why+`, e.g. /etc/shadow or /**/.ssh/id_rsa`)
		}
	}
	errs = append(errs, c.Audit.validate()...)
	errs = append(errs, c.Jobs.validate()...)
	errs = append(errs, c.Policy.Validate()...)
	if c.Auth.OAuth != nil {
		// An OAuth principal's id begins with the issuer.
		errs = append(errs, c.Policy.ValidateIssuer(c.Auth.OAuth.Issuer)...)
	}
	errs = append(errs, c.validateSandbox()...)
	return errors.Join(errs...)
}

// checkListen accepts what net.Listen("tcp", ...) takes and nothing that
// could mean something else: a host that is empty (every interface), an IP
// literal or a DNS name, and a decimal port 0..65535.
func checkListen(s string) error {
	const want = "must be HOST:PORT with an IP address or host name and a port 0..65535, e.g. 127.0.0.1:3210"
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New(want)
	}
	if host != "" && !isHost(host) {
		return errors.New(want)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || port != strconv.FormatUint(p, 10) {
		return errors.New(want)
	}
	return nil
}

// isHost reports whether s is an IP literal or a DNS name.
func isHost(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil || isHostName(s)
}

// isHostName reports whether s is a DNS name: labels of letters, digits and
// inner hyphens (underscores tolerated), at most 253 bytes, the last one not
// all digits (that would be a malformed IP address).
func isHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return false
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
				return false
			}
		}
	}
	return true
}

// checkPath accepts absolute, clean paths without control bytes: the
// program hands them to open(2) and exec(2), where a NUL or a relative path
// would only fail (or resolve elsewhere) at the first use.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return errors.New("must be an absolute path")
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("must not contain control characters")
	case path.Clean(p) != p:
		return fmt.Errorf("must be a clean path (%s)", path.Clean(p))
	}
	return nil
}

// IsLoopback reports whether the listen address is a loopback one.
func (c Config) IsLoopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// isOrigin reports whether o is an origin exactly as browsers send it in
// the Origin header, so that comparing strings is comparing origins.
func isOrigin(o string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	return o == u.Scheme+"://"+u.Host && u.User == nil && strings.ToLower(u.Host) == u.Host
}
