// Package config holds mcp-backend's configuration (DESIGN.md §3):
// Default() -> Parse(io.Reader) -> Validate(). Every key is optional, unknown
// keys are errors, and a file without "concurrency" gets the spec defaults.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/overdeck/mcp-backend/internal/strictjson"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Config is the whole backend configuration file.
type Config struct {
	Listen       string      `json:"listen"`
	AllowedHosts []string    `json:"allowedHosts"`
	Auth         Auth        `json:"auth"`
	Concurrency  Concurrency `json:"concurrency"`
	Limits       Limits      `json:"limits"`
	Shell        Shell       `json:"shell"`
}

// Auth configures access to /mcp: the operator's static bearer token, and
// OAuth for hosted connectors (nil: off). Either, both or neither.
type Auth struct {
	BearerTokenFile string `json:"bearerTokenFile"`
	OAuth           *OAuth `json:"oauth,omitempty"`
}

// Concurrency holds the admission limits (hardening spec §2.1).
type Concurrency struct {
	MaxActive       int `json:"maxActive"`
	ReservedControl int `json:"reservedControl"`
	MaxShell        int `json:"maxShell"`
	MaxQueue        int `json:"maxQueue"`
	QueueWaitMs     int `json:"queueWaitMs"`
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
		Listen:       "127.0.0.1:3210",
		AllowedHosts: []string{},
		Concurrency: Concurrency{
			MaxActive:       48,
			ReservedControl: 8,
			MaxShell:        8,
			MaxQueue:        64,
			QueueWaitMs:     30000,
		},
		Limits: Limits{OutputBytes: 4 << 20, ResponseBytes: 6 << 20},
		Shell:  Shell{Path: "/bin/bash", DefaultTimeoutMs: 60000, MaxTimeoutMs: 600000},
	}
}

// Parse reads a JSON config over the defaults. Keys that are absent keep
// their default; unknown keys and trailing data are errors.
func Parse(r io.Reader) (Config, error) {
	c := Default()
	data, err := io.ReadAll(r)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if err := strictjson.Decode(data, &c); err != nil {
		return c, fmt.Errorf("config: %w", describeJSONError(err))
	}
	if c.AllowedHosts == nil {
		c.AllowedHosts = []string{}
	}
	if o := c.Auth.OAuth; o != nil && o.Scopes == nil {
		o.Scopes = DefaultScopes()
	}
	return c, nil
}

// Load reads, parses and validates the file at path.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(bytes.NewReader(b))
	if err != nil {
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
		return fmt.Errorf("unknown key %s (valid keys: listen, allowedHosts, auth, concurrency, limits, shell and their documented sub-keys)", strings.TrimPrefix(s, "json: unknown field "))
	}
	return err
}

// responseHeadroom is what a response needs besides a tool's output.
const responseHeadroom = 64 << 10

// maxLimit bounds maxActive and maxQueue: the admission controller packs its
// gauges into 12-bit fields.
const maxLimit = 4095

// Validate checks every value and returns an error naming the first bad key,
// its value and what is allowed.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("%s = %v: %s", key, val, want))
	}
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		if _, _, herr := net.SplitHostPort(c.Listen); herr != nil || c.Listen == "" {
			bad("listen", fmt.Sprintf("%q", c.Listen), "must be HOST:PORT, e.g. 127.0.0.1:3210")
		}
	}
	for i, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			bad(fmt.Sprintf("allowedHosts[%d]", i), fmt.Sprintf("%q", h), "must be a host name such as mcp.example.com")
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
	if cc.QueueWaitMs <= 0 {
		bad("concurrency.queueWaitMs", cc.QueueWaitMs, "must be > 0")
	}
	if c.Limits.OutputBytes <= 0 {
		bad("limits.outputBytes", c.Limits.OutputBytes, "must be > 0")
	}
	if c.Limits.ResponseBytes <= 0 {
		bad("limits.responseBytes", c.Limits.ResponseBytes, "must be > 0")
	} else if c.Limits.OutputBytes > 0 && c.Limits.ResponseBytes < c.Limits.OutputBytes+responseHeadroom {
		// A result adds fields and an envelope around its output.
		bad("limits.responseBytes", c.Limits.ResponseBytes, fmt.Sprintf("must be >= limits.outputBytes + %d (%d)", responseHeadroom, c.Limits.OutputBytes+responseHeadroom))
	}
	if !strings.HasPrefix(c.Shell.Path, "/") {
		bad("shell.path", fmt.Sprintf("%q", c.Shell.Path), "must be an absolute path such as /bin/bash")
	}
	if c.Shell.DefaultTimeoutMs <= 0 {
		bad("shell.defaultTimeoutMs", c.Shell.DefaultTimeoutMs, "must be > 0")
	}
	if c.Shell.MaxTimeoutMs <= 0 {
		bad("shell.maxTimeoutMs", c.Shell.MaxTimeoutMs, "must be > 0")
	} else if c.Shell.DefaultTimeoutMs > c.Shell.MaxTimeoutMs {
		bad("shell.defaultTimeoutMs", c.Shell.DefaultTimeoutMs, fmt.Sprintf("must be <= shell.maxTimeoutMs (%d)", c.Shell.MaxTimeoutMs))
	}
	return errors.Join(errs...)
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
