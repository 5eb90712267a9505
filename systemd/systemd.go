// Package systemd is a thin client of systemd's manager over D-Bus: reload,
// start/stop/restart with the job's result awaited, enabling unit files, unit
// properties in a plain struct, and transient timer+service pairs (the armed
// automatic rollback). Callers declare the small interfaces they need.
package systemd

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// DefaultJobTimeout bounds the wait for a job when the context has no
// deadline: a unit's own timeouts end every job well before it.
const DefaultJobTimeout = 2 * time.Minute

// Options configure Connect.
type Options struct {
	// Address is a D-Bus address such as "unix:path=/run/dbus/system_bus_socket".
	// Empty means the system bus (DBUS_SYSTEM_BUS_ADDRESS or its default).
	Address string
	// Logger receives debug logs of jobs; nil discards them.
	Logger *slog.Logger
	// JobTimeout bounds waiting for a job when the context has no deadline;
	// DefaultJobTimeout when zero.
	JobTimeout time.Duration
}

// Client talks to one systemd manager. It is safe for concurrent use.
type Client struct {
	conn       *sddbus.Conn
	log        *slog.Logger
	jobTimeout time.Duration
}

// Connect opens two connections (calls and signals) to the bus at
// opts.Address, authenticating with EXTERNAL as the current uid. ctx bounds
// the whole connect (dial, auth, Hello, the signal match): a bus that
// accepts and never answers holds the caller no longer than ctx allows.
// The client outlives ctx; every later call takes its own context.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to systemd: %w", err)
	}
	addr := opts.Address
	if addr == "" {
		addr = os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
	}
	if addr == "" {
		addr = "unix:path=/run/dbus/system_bus_socket"
	}
	conn, err := NewConnContext(ctx, addr)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	jt := opts.JobTimeout
	if jt <= 0 {
		jt = DefaultJobTimeout
	}
	return &Client{conn: conn, log: log, jobTimeout: jt}, nil
}

// NewConnContext opens a go-systemd connection to the bus at addr
// (EXTERNAL auth as the current uid, then Hello), bounded by ctx: when ctx
// ends before the connection is set up, the sockets are closed, which ends a dial, an auth
// exchange or a call waiting for its reply, and the error wraps ctx.Err().
func NewConnContext(ctx context.Context, addr string) (*sddbus.Conn, error) {
	var (
		mu     sync.Mutex
		opened []*godbus.Conn
		done   bool
	)
	// No dbus.WithContext: it would close the connection when ctx ends, and
	// the connection outlives this call. Only the setup is bounded.
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		for _, c := range opened {
			c.Close()
		}
	})
	dial := func() (*godbus.Conn, error) {
		c, err := godbus.Dial(addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		opened = append(opened, c)
		mu.Unlock()
		if ctx.Err() != nil {
			c.Close()
			return nil, ctx.Err()
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	conn, err := sddbus.NewConnection(dial)
	stopped := stop()
	mu.Lock()
	done = true
	mu.Unlock()
	if err == nil && !stopped {
		// ctx ended while the connection was being set up: its sockets may
		// be closed under it.
		conn.Close()
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("connect to systemd at %s: %w", addr, err)
	}
	return conn, nil
}

// Close closes the connections.
func (c *Client) Close() { c.conn.Close() }

// SystemState is the manager's SystemState: "running", "degraded",
// "starting", ...
func (c *Client) SystemState(ctx context.Context) (string, error) {
	p, err := c.conn.SystemStateContext(ctx)
	if err != nil {
		return "", fmt.Errorf("system state: %w", err)
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("system state: unexpected value %v", p.Value)
	}
	return s, nil
}

// DaemonReload makes systemd re-read unit files.
func (c *Client) DaemonReload(ctx context.Context) error {
	if err := c.conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	return nil
}

// JobError is a job that ended with a result other than "done".
type JobError struct {
	Op, Unit, Result string
	// State describes the unit after the failure, before its failed state
	// was reset ("failed/failed result=exit-code status=1").
	State string
}

func (e *JobError) Error() string {
	s := fmt.Sprintf("%s %s: job %s", e.Op, e.Unit, e.Result)
	if e.State != "" {
		s += " (" + e.State + ")"
	}
	return s
}

type jobFunc func(ctx context.Context, name, mode string, ch chan<- string) (int, error)

// Start starts unit and waits until its job is done (for Type=notify: until
// READY=1).
func (c *Client) Start(ctx context.Context, unit string) error {
	return c.job(ctx, "start", unit, c.conn.StartUnitContext)
}

// Stop stops unit and waits for the job.
func (c *Client) Stop(ctx context.Context, unit string) error {
	return c.job(ctx, "stop", unit, c.conn.StopUnitContext)
}

// Restart restarts unit (starting it when stopped) and waits for the job.
func (c *Client) Restart(ctx context.Context, unit string) error {
	return c.job(ctx, "restart", unit, c.conn.RestartUnitContext)
}

// Reload reloads unit's configuration (ExecReload) and waits for the job.
func (c *Client) Reload(ctx context.Context, unit string) error {
	return c.job(ctx, "reload", unit, c.conn.ReloadUnitContext)
}

// RunJob queues a start, stop, restart or reload job for unit in "replace"
// mode and returns the job's result as systemd reports it ("done",
// "failed", "timeout", ...) without resetting anything: a tool that shows
// the outcome to its caller. Waiting is bounded by ctx, or the client's job
// timeout when ctx has no deadline.
func (c *Client) RunJob(ctx context.Context, action, unit string) (string, error) {
	var f jobFunc
	switch action {
	case "start":
		f = c.conn.StartUnitContext
	case "stop":
		f = c.conn.StopUnitContext
	case "restart":
		f = c.conn.RestartUnitContext
	case "reload":
		f = c.conn.ReloadUnitContext
	default:
		return "", fmt.Errorf("job %s %s: unknown action (want start, stop, restart or reload)", action, unit)
	}
	return c.await(ctx, action, unit, func(ch chan<- string) (int, error) { return f(ctx, unit, "replace", ch) })
}

// UnitOfPID names the unit whose cgroup holds process pid.
func (c *Client) UnitOfPID(ctx context.Context, pid int) (string, error) {
	u, err := c.conn.GetUnitNameByPID(ctx, uint32(pid))
	if err != nil {
		return "", fmt.Errorf("unit of pid %d: %w", pid, err)
	}
	return u, nil
}

// ErrorName is the D-Bus error name carried by err
// ("org.freedesktop.systemd1.NoSuchUnit"), or "" when err is not a D-Bus
// error reply (a transport failure, a context's end).
func ErrorName(err error) string {
	var de godbus.Error
	var dep *godbus.Error
	switch {
	case errors.As(err, &de):
		return de.Name
	case errors.As(err, &dep):
		return dep.Name
	}
	return ""
}

// job queues a job in "replace" mode and waits for its result. Only "done"
// is success; on any other result the unit's failed state is reset so a
// later start (a rollback) is not refused by the start limit.
func (c *Client) job(ctx context.Context, op, unit string, f jobFunc) error {
	res, err := c.await(ctx, op, unit, func(ch chan<- string) (int, error) { return f(ctx, unit, "replace", ch) })
	if err != nil {
		return err
	}
	c.log.Debug("systemd job finished", "op", op, "unit", unit, "result", res)
	if res == "done" {
		return nil
	}
	return c.failed(op, unit, res)
}

// await queues a job for unit (queue asks systemd for it) and waits for
// its result, bounded by ctx, or the client's job timeout when ctx has
// none.
func (c *Client) await(ctx context.Context, op, unit string, queue func(ch chan<- string) (int, error)) (string, error) {
	// Buffered: the dispatcher sends while holding the job table's lock, and
	// nobody may be listening any more once we gave up waiting.
	ch := make(chan string, 1)
	if _, err := queue(ch); err != nil {
		// No job was queued, so nothing will ever arrive on ch.
		return "", fmt.Errorf("%s %s: %w", op, unit, err)
	}
	wait := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, c.jobTimeout)
		defer cancel()
	}
	select {
	case res := <-ch:
		return res, nil
	case <-wait.Done():
		return "", fmt.Errorf("%s %s: waiting for the job: %w", op, unit, wait.Err())
	}
}

func (c *Client) failed(op, unit, result string) error {
	// The caller's context may be what ended; the cleanup still has to run.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	je := &JobError{Op: op, Unit: unit, Result: result}
	if st, err := c.Unit(ctx, unit); err == nil {
		je.State = fmt.Sprintf("%s/%s result=%s status=%d", st.ActiveState, st.SubState, st.Result, st.ExecMainStatus)
	}
	if err := c.conn.ResetFailedUnitContext(ctx, unit); err != nil {
		c.log.Debug("reset-failed after a failed job", "unit", unit, "err", err)
	}
	return je
}

// ResetFailed clears unit's failed state and start-limit counter.
func (c *Client) ResetFailed(ctx context.Context, unit string) error {
	if err := c.conn.ResetFailedUnitContext(ctx, unit); err != nil {
		return fmt.Errorf("reset-failed %s: %w", unit, err)
	}
	return nil
}

// Enable enables unit files (by name, in the unit search path) persistently,
// like systemctl enable: the symlinks of their [Install] sections.
func (c *Client) Enable(ctx context.Context, units ...string) error {
	if len(units) == 0 {
		return nil
	}
	if _, _, err := c.conn.EnableUnitFilesContext(ctx, units, false, true); err != nil {
		return fmt.Errorf("enable %s: %w", strings.Join(units, " "), err)
	}
	return nil
}

// Disable removes the enablement symlinks of unit files.
func (c *Client) Disable(ctx context.Context, units ...string) error {
	if len(units) == 0 {
		return nil
	}
	if _, err := c.conn.DisableUnitFilesContext(ctx, units, false); err != nil {
		return fmt.Errorf("disable %s: %w", strings.Join(units, " "), err)
	}
	return nil
}

// Unit reads unit's properties. A unit systemd does not know has LoadState
// "not-found"; that is not an error.
func (c *Client) Unit(ctx context.Context, unit string) (*unitstate.State, error) {
	props, err := c.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return nil, fmt.Errorf("properties of %s: %w", unit, err)
	}
	st := &unitstate.State{Name: unit}
	st.Description = str(props["Description"])
	st.LoadState = str(props["LoadState"])
	st.ActiveState = str(props["ActiveState"])
	st.SubState = str(props["SubState"])
	st.FragmentPath = str(props["FragmentPath"])
	st.UnitFileState = str(props["UnitFileState"])
	if b, ok := props["InvocationID"].([]byte); ok {
		st.InvocationID = hex.EncodeToString(b)
	}
	if us := u64(props["ActiveEnterTimestamp"]); us > 0 {
		st.ActiveEnterTimestamp = time.UnixMicro(int64(us))
	}
	if strings.HasSuffix(unit, ".socket") && st.LoadState == "loaded" {
		// Why a socket failed (service-start-limit-hit: its service's
		// crash loop took it down).
		if sp, err := c.conn.GetUnitTypePropertiesContext(ctx, unit, "Socket"); err == nil {
			st.Result = str(sp["Result"])
		}
		return st, nil
	}
	if !strings.HasSuffix(unit, ".service") || st.LoadState != "loaded" {
		return st, nil
	}
	sp, err := c.conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return nil, fmt.Errorf("service properties of %s: %w", unit, err)
	}
	st.Type = str(sp["Type"])
	st.Result = str(sp["Result"])
	st.MainPID = u32(sp["MainPID"])
	st.NRestarts = u32(sp["NRestarts"])
	if v, ok := sp["ExecMainStatus"].(int32); ok {
		st.ExecMainStatus = v
	}
	st.MemoryHigh = u64(sp["MemoryHigh"])
	st.MemoryMax = u64(sp["MemoryMax"])
	st.TasksMax = u64(sp["TasksMax"])
	st.CPUWeight = u64(sp["CPUWeight"])
	st.LimitNOFILE = u64(sp["LimitNOFILE"])
	st.TimeoutStop = time.Duration(u64(sp["TimeoutStopUSec"])) * time.Microsecond
	st.Watchdog = time.Duration(u64(sp["WatchdogUSec"])) * time.Microsecond
	if us := u64(sp["RuntimeMaxUSec"]); us < 1<<62 {
		st.RuntimeMax = time.Duration(us) * time.Microsecond
	}
	st.Slice = str(sp["Slice"])
	st.StatusText = str(sp["StatusText"])
	return st, nil
}

// UnitNames is what systemd resolves unit to (systemctl show -p
// Id,Names): the unit's own name (an alias such as sshd.service loads as
// the unit it names, ssh.service) and every name it is known by. A unit
// systemd cannot find is its name alone.
func (c *Client) UnitNames(ctx context.Context, unit string) (id string, names []string, err error) {
	props, err := c.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return "", nil, fmt.Errorf("names of %s: %w", unit, err)
	}
	id = str(props["Id"])
	names, _ = props["Names"].([]string)
	if id == "" {
		return "", nil, fmt.Errorf("names of %s: systemd gave no Id", unit)
	}
	return id, names, nil
}

// ResolveUnit is UnitNames on a connection of its own to the bus of opts,
// for a caller that asks once (the policy's units rules); ctx bounds it all.
func ResolveUnit(ctx context.Context, opts Options, unit string) (id string, names []string, err error) {
	c, err := Connect(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	return c.UnitNames(ctx, unit)
}

// Kill sends signal to unit's main process only (a production slot's
// takeover and handoff signals must not reach its commands).
func (c *Client) Kill(ctx context.Context, unit string, signal syscall.Signal) error {
	if err := c.conn.KillUnitWithTarget(ctx, unit, sddbus.Main, int32(signal)); err != nil {
		return fmt.Errorf("signal %v to %s: %w", signal, unit, err)
	}
	return nil
}

func str(v any) string     { s, _ := v.(string); return s }
func u64(v any) uint64     { n, _ := v.(uint64); return n }
func u32(v any) uint32     { n, _ := v.(uint32); return n }
func isGone(s string) bool { return s == "not-found" || s == "" }

// ArmTransient creates and starts the timer with its service as an auxiliary
// unit (StartTransientUnitAux). Transient units vanish at reboot; callers that
// must survive one keep their own marker.
func (c *Client) ArmTransient(ctx context.Context, t unitstate.Transient) error {
	service := strings.TrimSuffix(t.Timer, ".timer") + ".service"
	if t.Service == "" {
		t.Service = service
	}
	switch {
	case !strings.HasSuffix(t.Timer, ".timer") || t.Timer == ".timer":
		return fmt.Errorf("arm transient: timer %q: must end in .timer", t.Timer)
	case t.Service != service:
		return fmt.Errorf("arm transient: service %q: must be %q, the timer's own name", t.Service, service)
	case len(t.Argv) == 0 || !strings.HasPrefix(t.Argv[0], "/"):
		return fmt.Errorf("arm transient: argv %q: must start with an absolute path", t.Argv)
	case t.After < time.Second:
		return fmt.Errorf("arm transient: after %s: must be at least 1s", t.After)
	}
	// Unload them even after a failed run: a failed transient would stay
	// loaded and block arming the same names again until reset-failed.
	collect := sddbus.Property{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")}
	desc := t.Description
	if desc == "" {
		desc = strings.Join(t.Argv, " ")
	}
	timer := []sddbus.Property{
		sddbus.PropDescription(desc + " (timer)"),
		{Name: "TimersMonotonic", Value: godbus.MakeVariant([]struct {
			Base string
			USec uint64
		}{{"OnActiveSec", uint64(t.After / time.Microsecond)}})},
		{Name: "AccuracyUSec", Value: godbus.MakeVariant(uint64(time.Second / time.Microsecond))},
		{Name: "RemainAfterElapse", Value: godbus.MakeVariant(false)},
		collect,
	}
	svc := []sddbus.Property{
		sddbus.PropDescription(desc),
		sddbus.PropType("oneshot"),
		// The flag is systemd's ignore-failure bit (go-systemd names it
		// UncleanIsFailure): false, so a failing run is a failed unit.
		sddbus.PropExecStart(t.Argv, false),
		collect,
	}
	aux := []sddbus.PropertyCollection{{Name: t.Service, Properties: svc}}
	ch := make(chan string, 1)
	if _, err := c.conn.StartTransientUnitAux(ctx, t.Timer, "fail", timer, aux, ch); err != nil {
		return fmt.Errorf("arm %s: %w", t.Timer, err)
	}
	wait, cancel := context.WithTimeout(ctx, c.jobTimeout)
	defer cancel()
	select {
	case res := <-ch:
		if res != "done" {
			return &JobError{Op: "arm", Unit: t.Timer, Result: res}
		}
	case <-wait.Done():
		return fmt.Errorf("arm %s: waiting for the job: %w", t.Timer, wait.Err())
	}
	c.log.Debug("transient timer armed", "timer", t.Timer, "service", t.Service, "after", t.After)
	return nil
}

// DisarmTransient stops a waiting timer, then its service, and waits until
// systemd has unloaded both. It never stops a service that already started:
// if the timer fired, it returns ErrAlreadyFired and leaves the work running.
func (c *Client) DisarmTransient(ctx context.Context, timer, service string) error {
	st, err := c.Unit(ctx, timer)
	if err != nil {
		return fmt.Errorf("disarm: %w", err)
	}
	if isGone(st.LoadState) || st.ActiveState != "active" {
		return fmt.Errorf("disarm %s (%s/%s): %w", timer, st.LoadState, st.ActiveState, unitstate.ErrAlreadyFired)
	}
	if err := c.Stop(ctx, timer); err != nil {
		return fmt.Errorf("disarm: %w", err)
	}
	// The timer may have fired between the check and the stop.
	svc, err := c.Unit(ctx, service)
	if err != nil {
		return fmt.Errorf("disarm: %w", err)
	}
	if svc.ActiveState != "inactive" || svc.InvocationID != "" {
		return fmt.Errorf("disarm %s: service %s is %s: %w", timer, service, svc.ActiveState, unitstate.ErrAlreadyFired)
	}
	if err := c.stopIfLoaded(ctx, service); err != nil {
		return fmt.Errorf("disarm: %w", err)
	}
	return c.WaitGone(ctx, timer, service)
}

func (c *Client) stopIfLoaded(ctx context.Context, unit string) error {
	st, err := c.Unit(ctx, unit)
	if err != nil {
		return err
	}
	if isGone(st.LoadState) || st.ActiveState == "inactive" {
		return nil
	}
	return c.Stop(ctx, unit)
}

// Gone reports whether none of units is known to systemd any more (no unit
// listed, or LoadState not-found).
func (c *Client) Gone(ctx context.Context, units ...string) (bool, error) {
	sts, err := c.conn.ListUnitsByNamesContext(ctx, units)
	if err != nil {
		return false, fmt.Errorf("list %s: %w", strings.Join(units, " "), err)
	}
	for _, s := range sts {
		if !isGone(s.LoadState) {
			return false, nil
		}
	}
	return true, nil
}

// WaitGone waits until Gone(units) holds: systemd unloads stopped transient
// units on its next garbage collection, not within the stop job.
func (c *Client) WaitGone(ctx context.Context, units ...string) error {
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		gone, err := c.Gone(wait, units...)
		if err == nil && gone {
			return nil
		}
		select {
		case <-wait.Done():
			if err == nil {
				err = errors.New("still loaded")
			}
			return fmt.Errorf("wait for %s to be gone: %w (%w)", strings.Join(units, " "), err, wait.Err())
		case <-tick.C:
		}
	}
}

// ListUnits lists the units systemd has in memory (loaded, or referenced
// and not found), with their states.
func (c *Client) ListUnits(ctx context.Context) ([]unitstate.Listed, error) {
	sts, err := c.conn.ListUnitsContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	out := make([]unitstate.Listed, 0, len(sts))
	for _, s := range sts {
		out = append(out, unitstate.Listed{Name: s.Name, LoadState: s.LoadState, ActiveState: s.ActiveState, SubState: s.SubState})
	}
	return out, nil
}

// ExecStart reads a service's ExecStart commands. The property is an array
// of (path, argv, ignore_errors, timestamps..., pid, code, status) structs.
func (c *Client) ExecStart(ctx context.Context, service string) ([]unitstate.ExecCommand, error) {
	p, err := c.conn.GetServicePropertyContext(ctx, service, "ExecStart")
	if err != nil {
		return nil, fmt.Errorf("ExecStart of %s: %w", service, err)
	}
	return decodeExec(p.Value.Value())
}

// decodeExec turns the ExecStart property's value into commands.
func decodeExec(v any) ([]unitstate.ExecCommand, error) {
	rows, ok := v.([][]any)
	if !ok {
		return nil, fmt.Errorf("ExecStart: unexpected value of type %T, want an array of structs", v)
	}
	out := make([]unitstate.ExecCommand, 0, len(rows))
	for i, r := range rows {
		if len(r) < 2 {
			return nil, fmt.Errorf("ExecStart[%d]: %d fields, want at least path and argv", i, len(r))
		}
		path, ok1 := r[0].(string)
		argv, ok2 := r[1].([]string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("ExecStart[%d]: fields of type %T, %T, want string, []string", i, r[0], r[1])
		}
		out = append(out, unitstate.ExecCommand{Path: path, Argv: argv})
	}
	return out, nil
}

// Strings reads a unit property of type array of strings, such as
// TriggeredBy or WantedBy.
func (c *Client) Strings(ctx context.Context, unit, property string) ([]string, error) {
	p, err := c.conn.GetUnitPropertyContext(ctx, unit, property)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", property, unit, err)
	}
	s, ok := p.Value.Value().([]string)
	if !ok {
		return nil, fmt.Errorf("%s of %s: unexpected value of type %T, want []string", property, unit, p.Value.Value())
	}
	return s, nil
}

// UnitFileState reads a unit's UnitFileState (enabled, disabled, static, ...;
// "" for transient units).
func (c *Client) UnitFileState(ctx context.Context, unit string) (string, error) {
	p, err := c.conn.GetUnitPropertyContext(ctx, unit, "UnitFileState")
	if err != nil {
		return "", fmt.Errorf("UnitFileState of %s: %w", unit, err)
	}
	return str(p.Value.Value()), nil
}

// TransientService is a service started over D-Bus (what systemd-run
// does) that outlives its caller: the unit of one job, or of one fleet
// step.
type TransientService struct {
	Name, Description, Slice string
	Argv                     []string
	MemoryMax, TasksMax      uint64 // 0: no limit set
	RuntimeMax, StopTimeout  time.Duration
	// KillMode is the unit's KillMode=; "" leaves systemd's default
	// (control-group), as systemd-run does.
	KillMode string
	// Properties are set as given, after the ones above: the unit's
	// sandboxing (NoNewPrivileges, ProtectSystem, ...).
	Properties []Property
}

// Property is a unit property as systemd's D-Bus API names and types it:
// NoNewPrivileges a bool, CapabilityBoundingSet a uint64, ProtectSystem a
// string, ReadWritePaths a []string, SystemCallFilter a SyscallFilter.
type Property struct {
	Name  string
	Value any
}

// SyscallFilter is SystemCallFilter's (and RestrictAddressFamilies') D-Bus
// value, (bas): Allow false makes List a deny list.
type SyscallFilter struct {
	Allow bool
	List  []string
}

// StartTransientService starts t and waits for the start job: the main
// process runs (Type=exec: it has been executed) when it returns. The unit
// is collected once it is inactive or failed (systemd-run --collect).
func (c *Client) StartTransientService(ctx context.Context, t TransientService) error {
	switch {
	case !strings.HasSuffix(t.Name, ".service"):
		return fmt.Errorf("transient service %q: must end in .service", t.Name)
	case len(t.Argv) == 0 || !strings.HasPrefix(t.Argv[0], "/"):
		return fmt.Errorf("transient service %s: argv %q must start with an absolute path", t.Name, t.Argv)
	}
	props := []sddbus.Property{
		sddbus.PropDescription(t.Description),
		sddbus.PropType("exec"),
		sddbus.PropExecStart(t.Argv, false),
		{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
	}
	if t.KillMode != "" {
		props = append(props, sddbus.Property{Name: "KillMode", Value: godbus.MakeVariant(t.KillMode)})
	}
	if t.Slice != "" {
		props = append(props, sddbus.PropSlice(t.Slice))
	}
	if t.MemoryMax > 0 {
		props = append(props, sddbus.Property{Name: "MemoryMax", Value: godbus.MakeVariant(t.MemoryMax)})
	}
	if t.TasksMax > 0 {
		props = append(props, sddbus.Property{Name: "TasksMax", Value: godbus.MakeVariant(t.TasksMax)})
	}
	if t.RuntimeMax > 0 {
		props = append(props, sddbus.Property{Name: "RuntimeMaxUSec", Value: godbus.MakeVariant(uint64(t.RuntimeMax / time.Microsecond))})
	}
	if t.StopTimeout > 0 {
		props = append(props, sddbus.Property{Name: "TimeoutStopUSec", Value: godbus.MakeVariant(uint64(t.StopTimeout / time.Microsecond))})
	}
	for _, p := range t.Properties {
		props = append(props, sddbus.Property{Name: p.Name, Value: godbus.MakeVariant(p.Value)})
	}
	res, err := c.await(ctx, "start", t.Name, func(ch chan<- string) (int, error) {
		return c.conn.StartTransientUnitContext(ctx, t.Name, "fail", props, ch)
	})
	if err != nil {
		return err
	}
	if res != "done" {
		return &JobError{Op: "start", Unit: t.Name, Result: res}
	}
	return nil
}
