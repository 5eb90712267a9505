package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// unitSuffixes are the unit types systemd knows; a unit name must end in one.
var unitSuffixes = []string{
	".service", ".socket", ".target", ".timer", ".mount", ".automount",
	".swap", ".path", ".slice", ".scope", ".device",
}

// Actions of service.control.
const (
	actionStart   = "start"
	actionStop    = "stop"
	actionRestart = "restart"
	actionReload  = "reload"
)

// ServiceStatusInput is the input of service.status.
type ServiceStatusInput struct {
	Unit string `json:"unit" jsonschema:"full unit name, e.g. mcp-backend.service"`
}

// ServiceStatus is the state of one unit.
type ServiceStatus struct {
	Unit          string  `json:"unit"`
	Description   string  `json:"description"`
	LoadState     string  `json:"loadState"`
	ActiveState   string  `json:"activeState"`
	SubState      string  `json:"subState"`
	UnitFileState string  `json:"unitFileState,omitempty"`
	MainPID       int     `json:"mainPid" jsonschema:"0 when none (or not a service)"`
	Result        string  `json:"result,omitempty" jsonschema:"service result, e.g. success or exit-code"`
	Since         *string `json:"since" jsonschema:"ActiveEnterTimestamp as RFC3339; null when never active"`
}

// ServiceControlInput is the input of service.control.
type ServiceControlInput struct {
	Unit   string `json:"unit" jsonschema:"full unit name, e.g. mcp-tunnel-overdeck.service"`
	Action string `json:"action" jsonschema:"start, stop, restart or reload"`
}

func (*ServiceControlInput) tweakSchema(s *jsonschema.Schema) {
	s.Properties["action"].Enum = []any{actionStart, actionStop, actionRestart, actionReload}
}

// ServiceControlResult is the result of service.control: the job finished
// with "done" and the unit's state afterwards.
type ServiceControlResult struct {
	Unit      string        `json:"unit"`
	Action    string        `json:"action"`
	JobResult string        `json:"jobResult" jsonschema:"always done on success"`
	Status    ServiceStatus `json:"status"`
}

// validateUnit checks a unit name: systemd's character set, at most 255
// bytes, a unit type suffix.
func validateUnit(name string) error {
	if name == "" {
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": must not be empty")
	}
	if len(name) > 255 {
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": longer than 255 bytes")
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":-_.\\@", r)
		if !ok {
			return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": invalid character %q in %q (allowed: letters, digits, and :-_.\\@)", r, name)
		}
	}
	for _, suf := range unitSuffixes {
		if strings.HasSuffix(name, suf) && len(name) > len(suf) && !strings.HasPrefix(name, "@") {
			return nil
		}
	}
	return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": %q must be a full unit name ending in one of %s", name, strings.Join(unitSuffixes, ", "))
}

// connect opens one D-Bus connection to systemd for one call.
func (t *Tools) connect(ctx context.Context) (*sddbus.Conn, error) {
	conn, err := t.opts.SystemdBus(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, toolerr.New(mcpwire.CodeUnavailable, "systemd is not reachable over D-Bus (is this host running systemd with a system bus?): %v", err)
	}
	return conn, nil
}

func (t *Tools) serviceStatus(ctx context.Context, in ServiceStatusInput) (ServiceStatus, error) {
	if err := validateUnit(in.Unit); err != nil {
		return ServiceStatus{}, err
	}
	conn, err := t.connect(ctx)
	if err != nil {
		return ServiceStatus{}, err
	}
	defer conn.Close()
	st, err := unitStatus(ctx, conn, in.Unit)
	if err != nil {
		return st, err
	}
	if st.LoadState == "not-found" {
		return ServiceStatus{}, toolerr.New(mcpwire.CodeNotFound, "argument \"unit\": unit %s not found (LoadState=not-found)", in.Unit)
	}
	return st, nil
}

// unitStatus reads a unit's properties; MainPID and Result only for services.
func unitStatus(ctx context.Context, conn *sddbus.Conn, unit string) (ServiceStatus, error) {
	props, err := conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return ServiceStatus{}, dbusError(ctx, unit, err)
	}
	st := ServiceStatus{
		Unit:          unit,
		Description:   propString(props, "Description"),
		LoadState:     propString(props, "LoadState"),
		ActiveState:   propString(props, "ActiveState"),
		SubState:      propString(props, "SubState"),
		UnitFileState: propString(props, "UnitFileState"),
	}
	if us, ok := props["ActiveEnterTimestamp"].(uint64); ok && us > 0 {
		s := time.UnixMicro(int64(us)).UTC().Format(time.RFC3339)
		st.Since = &s
	}
	if strings.HasSuffix(unit, ".service") && st.LoadState == "loaded" {
		sp, err := conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
		if err != nil {
			return st, dbusError(ctx, unit, err)
		}
		if pid, ok := sp["MainPID"].(uint32); ok {
			st.MainPID = int(pid)
		}
		st.Result = propString(sp, "Result")
	}
	return st, nil
}

func propString(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func (t *Tools) serviceControl(ctx context.Context, in ServiceControlInput) (ServiceControlResult, error) {
	var res ServiceControlResult
	if err := validateUnit(in.Unit); err != nil {
		return res, err
	}
	type jobFunc func(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	conn, err := t.connect(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	var job jobFunc
	switch in.Action {
	case actionStart:
		job = conn.StartUnitContext
	case actionStop:
		job = conn.StopUnitContext
	case actionRestart:
		job = conn.RestartUnitContext
	case actionReload:
		job = conn.ReloadUnitContext
	default:
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"action\": must be start, stop, restart or reload (got %q)", in.Action)
	}
	if in.Action == actionStop || in.Action == actionRestart {
		// Stopping the backend's own unit from inside it would kill this call
		// before it can answer.
		if own, err := conn.GetUnitNameByPID(ctx, uint32(selfPID)); err == nil && own == in.Unit {
			return res, toolerr.New(mcpwire.CodePermissionDenied, "argument \"unit\": refusing to %s %s, the unit running this backend: the call could not complete; use mcpctl", in.Action, in.Unit)
		}
	}

	// Buffered so the signal dispatcher never blocks on a result nobody reads.
	ch := make(chan string, 1)
	if _, err := job(ctx, in.Unit, "replace", ch); err != nil {
		// No job was created: nothing will ever be sent on ch.
		return res, dbusError(ctx, in.Unit, err)
	}
	t.log.Info("tools: systemd job queued", "unit", in.Unit, "action", in.Action)
	deadline := time.NewTimer(serviceJobDeadline)
	defer deadline.Stop()
	var result string
	select {
	case result = <-ch:
	case <-deadline.C:
		return res, toolerr.New(mcpwire.CodeTimeout, "%s %s: job did not finish within %s (it may still be running)", in.Action, in.Unit, serviceJobDeadline)
	case <-ctx.Done():
		return res, fmt.Errorf("%s %s: stopped waiting for the job (it may still be running): %w", in.Action, in.Unit, ctx.Err())
	}
	st, stErr := unitStatus(ctx, conn, in.Unit)
	state := ""
	if stErr == nil {
		state = fmt.Sprintf(" (ActiveState=%s SubState=%s Result=%s)", st.ActiveState, st.SubState, st.Result)
	}
	switch result {
	case "done":
	case "timeout":
		return res, toolerr.New(mcpwire.CodeTimeout, "%s %s: systemd job timed out%s", in.Action, in.Unit, state)
	case "canceled":
		return res, toolerr.New(mcpwire.CodeCancelled, "%s %s: systemd job was canceled%s", in.Action, in.Unit, state)
	case "skipped", "invalid", "unsupported":
		// e.g. reload of an inactive unit ends as "invalid".
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "%s %s: job result %q: not applicable to the unit's current state%s", in.Action, in.Unit, result, state)
	default: // failed, dependency, and results newer systemd versions add
		return res, toolerr.New(mcpwire.CodeUnavailable, "%s %s: systemd job result %q%s", in.Action, in.Unit, result, state)
	}
	if stErr != nil {
		return res, stErr
	}
	return ServiceControlResult{Unit: in.Unit, Action: in.Action, JobResult: result, Status: st}, nil
}

// dbusError maps a D-Bus failure about unit to a tool error.
func dbusError(ctx context.Context, unit string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("systemd call for %s: %w", unit, ctx.Err())
	}
	var de dbus.Error
	var dep *dbus.Error
	switch {
	case errors.As(err, &de):
	case errors.As(err, &dep):
		de = *dep
	default:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return toolerr.New(mcpwire.CodeTimeout, "systemd call for %s: %v", unit, err)
		}
		return toolerr.New(mcpwire.CodeUnavailable, "systemd call for %s failed: %v", unit, err)
	}
	msg := de.Error()
	switch de.Name {
	case "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed":
		return toolerr.New(mcpwire.CodeNotFound, "argument \"unit\": %s: %s", unit, msg)
	case "org.freedesktop.DBus.Error.AccessDenied", "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
		"org.freedesktop.DBus.Error.AuthFailed":
		return toolerr.New(mcpwire.CodePermissionDenied, "systemd refused the call for %s: %s", unit, msg)
	case "org.freedesktop.systemd1.UnitMasked", "org.freedesktop.systemd1.JobTypeNotApplicable",
		"org.freedesktop.systemd1.OnlyByDependency", "org.freedesktop.systemd1.TransactionIsDestructive",
		"org.freedesktop.systemd1.UnitInactive", "org.freedesktop.systemd1.UnitGenerated",
		"org.freedesktop.systemd1.TransactionJobsConflicting", "org.freedesktop.DBus.Error.InvalidArgs":
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": %s: %s (%s)", unit, msg, de.Name)
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NoReply",
		"org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.NoServer",
		"org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
		return toolerr.New(mcpwire.CodeUnavailable, "systemd is not answering for %s: %s (%s)", unit, msg, de.Name)
	}
	return toolerr.New(mcpwire.CodeInternal, "systemd call for %s: %s (%s)", unit, msg, de.Name)
}
