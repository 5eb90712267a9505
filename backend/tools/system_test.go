package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
)

func TestSystemInfo(t *testing.T) {
	opts := testOptions()
	opts.Admission = func() any { return map[string]any{"active": map[string]int{"total": 3}} }
	h := newHarness(t, opts)
	r := ok[SystemInfoResult](t, h, mcpwire.ToolSystemInfo, nil)
	host, _ := os.Hostname()
	if r.Hostname != host || r.OS.Kernel != "Linux" || r.OS.Release == "" || r.CPUCount != runtime.NumCPU() ||
		r.Memory.TotalBytes <= 0 || r.Memory.AvailableBytes <= 0 || r.Memory.AvailableBytes > r.Memory.TotalBytes || r.UptimeSeconds <= 0 {
		t.Fatalf("host facts: %+v", r)
	}
	b := r.Backend
	if b.PID != os.Getpid() || b.Version != buildinfo.Version || !strings.HasPrefix(b.Build, "sha256:") || b.GoVersion != runtime.Version() {
		t.Fatalf("backend facts: %+v", b)
	}
	adm, _ := json.Marshal(r.Admission)
	if string(adm) != `{"active":{"total":3}}` {
		t.Fatalf("admission snapshot %s", adm)
	}

	// Without a snapshot function the field is simply absent.
	h2 := newHarness(t, testOptions())
	if r := ok[SystemInfoResult](t, h2, mcpwire.ToolSystemInfo, map[string]any{}); r.Admission != nil {
		t.Fatalf("admission %v", r.Admission)
	}
	fails(t, h2, mcpwire.ToolSystemInfo, map[string]any{"verbose": true}, mcpwire.CodeInvalidArgument)
}

func TestValidateUnit(t *testing.T) {
	tests := []struct {
		unit string
		ok   bool
	}{
		{"mcp-backend.service", true},
		{"getty@tty1.service", true},
		{"mcpctl-rollback.timer", true},
		{"system-foo\\x2dbar.slice", true},
		{"-.mount", true},
		{"", false},
		{"mcp-backend", false},
		{".service", false},
		{"@.service", false},
		{"../etc.service", false},
		{"a b.service", false},
		{"x.servic", false},
		{strings.Repeat("a", 250) + ".service", false},
	}
	for _, tc := range tests {
		t.Run(tc.unit, func(t *testing.T) {
			err := validateUnit(tc.unit)
			if (err == nil) != tc.ok {
				t.Fatalf("validateUnit(%q) = %v, want ok=%v", tc.unit, err, tc.ok)
			}
			if err != nil && (toolerr.As(err).Code != mcpwire.CodeInvalidArgument || !strings.Contains(err.Error(), "unit")) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

func TestServiceToolsWithoutSystemd(t *testing.T) {
	connects := 0
	opts := testOptions()
	opts.SystemdBus = func(ctx context.Context) (*systemd.Client, error) {
		connects++
		return nil, errors.New("dial unix /run/dbus/system_bus_socket: connect: no such file or directory")
	}
	h := newHarness(t, opts)
	tests := []struct {
		name string
		tool string
		args map[string]any
		code mcpwire.Code
		want string
	}{
		{"status no bus", mcpwire.ToolServiceStatus, map[string]any{"unit": "mcp-backend.service"}, mcpwire.CodeUnavailable, "D-Bus"},
		{"control no bus", mcpwire.ToolServiceControl, map[string]any{"unit": "mcp-backend.service", "action": "restart"}, mcpwire.CodeUnavailable, "D-Bus"},
		{"status bad unit", mcpwire.ToolServiceStatus, map[string]any{"unit": "mcp-backend"}, mcpwire.CodeInvalidArgument, "unit"},
		{"control bad unit", mcpwire.ToolServiceControl, map[string]any{"unit": "x;reboot.service", "action": "start"}, mcpwire.CodeInvalidArgument, "unit"},
		{"control bad action", mcpwire.ToolServiceControl, map[string]any{"unit": "a.service", "action": "explode"}, mcpwire.CodeInvalidArgument, "action"},
		{"control missing action", mcpwire.ToolServiceControl, map[string]any{"unit": "a.service"}, mcpwire.CodeInvalidArgument, "action"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := connects
			e := fails(t, h, tc.tool, tc.args, tc.code)
			if !strings.Contains(e.Message, tc.want) {
				t.Fatalf("message %q does not mention %q", e.Message, tc.want)
			}
			if tc.code == mcpwire.CodeUnavailable && !e.Retryable {
				t.Fatalf("UNAVAILABLE not retryable")
			}
			if tc.code == mcpwire.CodeInvalidArgument && connects != before {
				t.Fatalf("invalid arguments reached D-Bus")
			}
		})
	}
}

// The default connector (the system bus) fails cleanly on a host without one.
func TestServiceStatusDefaultBusMissing(t *testing.T) {
	if _, err := os.Stat("/run/dbus/system_bus_socket"); err == nil {
		t.Skip("this host has a system bus")
	}
	h := newHarness(t, testOptions())
	fails(t, h, mcpwire.ToolServiceStatus, map[string]any{"unit": "mcp-backend.service"}, mcpwire.CodeUnavailable)
}

func TestDBusErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		code mcpwire.Code
	}{
		{dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit x.service not found."}}, mcpwire.CodeNotFound},
		{&dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}, mcpwire.CodePermissionDenied},
		{dbus.Error{Name: "org.freedesktop.systemd1.UnitMasked"}, mcpwire.CodeInvalidArgument},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply"}, mcpwire.CodeUnavailable},
		{dbus.Error{Name: "org.example.Weird"}, mcpwire.CodeInternal},
		{errors.New("connection closed"), mcpwire.CodeUnavailable},
		{fmt.Errorf("properties: %w", os.ErrDeadlineExceeded), mcpwire.CodeTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			tl := &Tools{opts: Options{DBusTimeout: time.Second}}
			if got := toolerr.As(tl.dbusError(context.Background(), context.Background(), "x.service", tc.err)).Code; got != tc.code {
				t.Fatalf("got %s, want %s", got, tc.code)
			}
		})
	}
}
