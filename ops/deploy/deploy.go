// Package deploy changes production: the first install, the blue/green
// canary, the cutover under an armed automatic rollback, and the rollback.
// Each decision is a pure plan from observed facts (PlanInstall, PlanCanary,
// PlanPreflight, Judge, PlanRollback); a small executor applies it through
// the Systemd its caller passes in, the release store, the state directory
// and the verify probes. Every failure is an *Error carrying mcpctl's exit
// code.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/overdeck/mcp-backend/ops/candidate"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/release"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/verify"
	"github.com/overdeck/mcp-backend/systemd/unitstate"
	"github.com/overdeck/mcp-backend/units"
)

// Systemd is the part of the systemd client install, canary, cutover and
// rollback act through (systemd's *Client; the e2e test asserts it, so
// that this package and its planners do not link D-Bus).
type Systemd interface {
	DaemonReload(ctx context.Context) error
	Enable(ctx context.Context, units ...string) error
	Disable(ctx context.Context, units ...string) error
	Start(ctx context.Context, unit string) error
	Stop(ctx context.Context, unit string) error
	Restart(ctx context.Context, unit string) error
	// Kill signals a unit's main process (a production slot's takeover
	// and handoff).
	Kill(ctx context.Context, unit string, signal syscall.Signal) error
	ResetFailed(ctx context.Context, unit string) error
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
	ArmTransient(ctx context.Context, t unitstate.Transient) error
	DisarmTransient(ctx context.Context, timer, service string) error
	Gone(ctx context.Context, units ...string) (bool, error)
	WaitGone(ctx context.Context, units ...string) error
	// What the duplicate-supervisor preflight reads of every loaded service.
	ListUnits(ctx context.Context) ([]unitstate.Listed, error)
	ExecStart(ctx context.Context, service string) ([]unitstate.ExecCommand, error)
	UnitFileState(ctx context.Context, unit string) (string, error)
	Strings(ctx context.Context, unit, property string) ([]string, error)
}

// Env is what install, canary, cutover and rollback act on.
type Env struct {
	Config  *ctlconfig.Config
	Systemd Systemd
	// Verify runs every probe (verify.ForBackend builds it with the backend's
	// bearer token); a zero verify.Client (no token) when nil.
	Verify *verify.Client
	Logger *slog.Logger
	// MCPCtl is the absolute path of the mcpctl binary the rendered units and
	// the armed rollback timer run (units.DefaultMCPCtl when empty for the
	// units), and MCPCtlConfig the --config they pass ("" for none).
	MCPCtl       string
	MCPCtlConfig string
	// ReadyTimeout bounds the wait for /healthz and /readyz after a start;
	// 30 s when zero (the units' TimeoutStartSec).
	ReadyTimeout time.Duration
	// SampleEvery is how often canary start samples production's /healthz;
	// DefaultSampleEvery when zero.
	SampleEvery time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// LockWait is how long a command waits for the mcpctl lock while
	// another holds it (state.DefaultLockWait when zero; negative: not at
	// all). LockWaiting, when set, is told the holder once as the wait
	// starts.
	LockWait    time.Duration
	LockWaiting func(*state.Holder)
	// Pause, when set, is called at each named point of a takeover
	// (PauseVerified, PauseTookOver): only the fault matrix's e2e tests
	// set it (PauseEnv), to kill mcpctl exactly there.
	Pause func(ctx context.Context, point string)
}

// lock takes the mcpctl lock for owner, waiting for a short holder (a
// watchdog round, a snapshot) up to Env.LockWait, at least atLeast.
func (e *Env) lock(ctx context.Context, owner string, atLeast time.Duration) (release func() error, err error) {
	wait := e.LockWait
	switch {
	case wait == 0:
		wait = state.DefaultLockWait
	case wait < 0:
		wait = 0
	}
	return e.state().LockWait(ctx, owner, max(wait, atLeast), e.LockWaiting)
}

// DefaultSampleEvery is Env.SampleEvery when zero.
const DefaultSampleEvery = 50 * time.Millisecond

func (e *Env) sampleEvery() time.Duration {
	if e.SampleEvery <= 0 {
		return DefaultSampleEvery
	}
	return e.SampleEvery
}

func (e *Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Env) log() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

func (e *Env) verifier() *verify.Client {
	if e.Verify == nil {
		return &verify.Client{}
	}
	return e.Verify
}

func (e *Env) readyTimeout() time.Duration {
	if e.ReadyTimeout <= 0 {
		return 30 * time.Second
	}
	return e.ReadyTimeout
}

func (e *Env) backendURL() string { return URL(e.Config.Backend.Listen) }

// state is the state directory of mcpctl.json.
func (e *Env) state() state.Dir { return state.Dir(e.Config.StateDir) }

func (e *Env) store() *release.Store { return &release.Store{Root: e.Config.Install.Root} }

func (e *Env) render(canaryBinary string) ([]units.Unit, error) {
	spec, err := e.Config.UnitSpec()
	if err != nil {
		return nil, err
	}
	us, err := units.Render(units.Params{Spec: spec, MCPCtl: e.MCPCtl, MCPCtlConfig: e.MCPCtlConfig, CanaryBinary: canaryBinary})
	if err != nil {
		return nil, fmt.Errorf("render units: %w", err)
	}
	return us, nil
}

// URL is the http base URL of a listen address.
func URL(listen string) string { return "http://" + listen }

// DefaultBackendConfig is the backend config install writes where none
// exists: every default, listening where mcpctl.json says.
func DefaultBackendConfig(listen string) []byte {
	b, _ := json.MarshalIndent(map[string]any{"listen": listen}, "", "  ")
	return append(b, '\n')
}

// WithListen returns the JSON object config with "listen" replaced, keeping
// every other key as it is (a newer candidate may know keys this mcpctl does
// not).
func WithListen(config []byte, listen string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(config, &m); err != nil {
		return nil, fmt.Errorf("backend config is not a JSON object: %w", err)
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	l, _ := json.Marshal(listen)
	m["listen"] = l
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// PortFree reports whether listen can be bound now (nobody else holds it).
func PortFree(listen string) bool {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// waitReady polls url until /healthz and /readyz answer 200 and, when
// digest is set, system.info reports that build, or until timeout passes.
func (e *Env) waitReady(ctx context.Context, url, digest string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v := e.verifier()
	var last string
	for {
		hc, _, herr := v.Healthz(ctx, url)
		if herr == nil && hc == 200 {
			rc, body, rerr := v.Readyz(ctx, url)
			if rerr == nil && rc == 200 {
				if digest == "" {
					return nil
				}
				_, got, err := e.info(ctx, url)
				if err == nil && got == digest {
					return nil
				}
				if err != nil {
					last = "system.info: " + err.Error()
				} else {
					last = fmt.Sprintf("backend reports build %q, want %q", got, digest)
				}
			} else {
				last = fmt.Sprintf("/readyz: %d %s %v", rc, bytes.TrimSpace(body), rerr)
			}
		} else {
			last = fmt.Sprintf("/healthz: %d %v", hc, herr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s (last: %s)", url, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// info asks the backend at url for its version and build within
// verify.ProbeTimeout.
func (e *Env) info(ctx context.Context, url string) (version, digest string, err error) {
	ctx, cancel := context.WithTimeout(ctx, verify.ProbeTimeout)
	defer cancel()
	return e.verifier().SystemInfo(ctx, url)
}

// loaded reports whether systemd knows the unit with a unit file or a
// running process.
func loaded(u *unitstate.State) bool {
	return u != nil && u.LoadState != "" && u.LoadState != "not-found"
}

// active reports a unit that runs or is starting or stopping.
func active(u *unitstate.State) bool {
	return u != nil && unitstate.Running(u.ActiveState)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ErrVersionName is a --version that differs from what the build prints
// (a usage error: nothing is changed).
var ErrVersionName = errors.New("--version does not match the build")

// checkVersion enforces that a release is named by what its build prints:
// verification compares system.info's backend.version with it, so any other
// name would fail after production was touched. Both failures are usage
// errors; a mismatch also wraps ErrVersionName.
func checkVersion(cand *candidate.Result, want string) error {
	if want != "" && want != cand.Version {
		return &Error{Code: CodeUsage, Err: fmt.Errorf("%w: the build prints version %s; --version %s would name it wrongly: rebuild with the version stamp, or omit --version", ErrVersionName, cand.Version, want)}
	}
	if err := release.ValidateVersion(cand.Version); err != nil {
		return &Error{Code: CodeUsage, Err: fmt.Errorf("the build prints version %q, which cannot name a release: %w", cand.Version, err)}
	}
	return nil
}
