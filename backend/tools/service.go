package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
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

// connect opens one D-Bus connection to systemd for one call, bounded by
// the call's D-Bus deadline: a bus that accepts and never answers ends the
// call with TIMEOUT instead of holding its slot.
func (t *Tools) connect(ctx context.Context) (*systemd.Client, error) {
	cctx, cancel := context.WithTimeout(ctx, t.opts.DBusTimeout)
	defer cancel()
	c, err := t.opts.SystemdBus(cctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if cctx.Err() != nil {
			return nil, toolerr.New(mcpwire.CodeTimeout, "systemd did not answer over D-Bus within %s (connect and authenticate): %v", t.opts.DBusTimeout, err)
		}
		return nil, toolerr.New(mcpwire.CodeUnavailable, "systemd is not reachable over D-Bus (is this host running systemd with a system bus?): %v", err)
	}
	return c, nil
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
	st, err := t.unitStatus(ctx, conn, in.Unit)
	if err != nil {
		return st, err
	}
	if st.LoadState == "not-found" {
		return ServiceStatus{}, toolerr.New(mcpwire.CodeNotFound, "argument \"unit\": unit %s not found (LoadState=not-found)", in.Unit)
	}
	return st, nil
}

// unitStatus reads a unit's properties (MainPID and Result only for
// services) within the call's D-Bus deadline.
func (t *Tools) unitStatus(ctx context.Context, conn *systemd.Client, unit string) (ServiceStatus, error) {
	rctx, cancel := context.WithTimeout(ctx, t.opts.DBusTimeout)
	defer cancel()
	u, err := conn.Unit(rctx, unit)
	if err != nil {
		return ServiceStatus{}, t.dbusError(ctx, rctx, unit, err)
	}
	st := ServiceStatus{
		Unit:          unit,
		Description:   u.Description,
		LoadState:     u.LoadState,
		ActiveState:   u.ActiveState,
		SubState:      u.SubState,
		UnitFileState: u.UnitFileState,
		MainPID:       int(u.MainPID),
		Result:        u.Result,
	}
	if !u.ActiveEnterTimestamp.IsZero() {
		s := u.ActiveEnterTimestamp.UTC().Format(time.RFC3339)
		st.Since = &s
	}
	return st, nil
}

func (t *Tools) serviceControl(ctx context.Context, in ServiceControlInput) (ServiceControlResult, error) {
	var res ServiceControlResult
	if err := validateUnit(in.Unit); err != nil {
		return res, err
	}
	switch in.Action {
	case actionStart, actionStop, actionRestart, actionReload:
	default:
		return res, toolerr.New(mcpwire.CodeInvalidArgument, "argument \"action\": must be start, stop, restart or reload (got %q)", in.Action)
	}
	conn, err := t.connect(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if in.Action == actionStop || in.Action == actionRestart {
		// Stopping the backend's own unit from inside it would kill this call
		// before it can answer.
		octx, cancel := context.WithTimeout(ctx, t.opts.DBusTimeout)
		own, err := conn.UnitOfPID(octx, selfPID)
		cancel()
		if err == nil && own == in.Unit {
			return res, toolerr.New(mcpwire.CodePermissionDenied, "argument \"unit\": refusing to %s %s, the unit running this backend: the call could not complete; use mcpctl", in.Action, in.Unit)
		}
	}
	jctx, cancel := context.WithTimeout(ctx, serviceJobDeadline)
	defer cancel()
	result, err := conn.RunJob(jctx, in.Action, in.Unit)
	if err != nil {
		if ctx.Err() == nil && jctx.Err() != nil {
			return res, toolerr.New(mcpwire.CodeTimeout, "%s %s: job did not finish within %s (it may still be running)", in.Action, in.Unit, serviceJobDeadline)
		}
		return res, t.dbusError(ctx, jctx, in.Unit, err)
	}
	t.log.Info("tools: systemd job finished", "unit", in.Unit, "action", in.Action, "result", result)
	st, stErr := t.unitStatus(ctx, conn, in.Unit)
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

// dbusError maps a D-Bus failure about unit to a tool error. ctx is the
// call's, dctx the D-Bus deadline's: its end is TIMEOUT, the call's own
// end (client gone, cancelled) passes through.
func (t *Tools) dbusError(ctx, dctx context.Context, unit string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("systemd call for %s: %w", unit, ctx.Err())
	}
	if dctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return toolerr.New(mcpwire.CodeTimeout, "systemd did not answer over D-Bus within %s for %s: %v", t.opts.DBusTimeout, unit, err)
	}
	name := systemd.ErrorName(err)
	if name == "" {
		return toolerr.New(mcpwire.CodeUnavailable, "systemd call for %s failed: %v", unit, err)
	}
	msg := err.Error()
	switch name {
	case "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed":
		return toolerr.New(mcpwire.CodeNotFound, "argument \"unit\": %s: %s", unit, msg)
	case "org.freedesktop.DBus.Error.AccessDenied", "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
		"org.freedesktop.DBus.Error.AuthFailed":
		return toolerr.New(mcpwire.CodePermissionDenied, "systemd refused the call for %s: %s", unit, msg)
	case "org.freedesktop.systemd1.UnitMasked", "org.freedesktop.systemd1.JobTypeNotApplicable",
		"org.freedesktop.systemd1.OnlyByDependency", "org.freedesktop.systemd1.TransactionIsDestructive",
		"org.freedesktop.systemd1.UnitInactive", "org.freedesktop.systemd1.UnitGenerated",
		"org.freedesktop.systemd1.TransactionJobsConflicting", "org.freedesktop.DBus.Error.InvalidArgs":
		return toolerr.New(mcpwire.CodeInvalidArgument, "argument \"unit\": %s: %s (%s)", unit, msg, name)
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NoReply",
		"org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.NoServer",
		"org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
		return toolerr.New(mcpwire.CodeUnavailable, "systemd is not answering for %s: %s (%s)", unit, msg, name)
	}
	return toolerr.New(mcpwire.CodeInternal, "systemd call for %s: %s (%s)", unit, msg, name)
}
