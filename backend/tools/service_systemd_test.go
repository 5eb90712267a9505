package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/systemd"
)

// busAt connects service.* to the bus at addr, as the default connector
// does to the system bus.
func busAt(addr string) func(ctx context.Context) (*systemd.Client, error) {
	return func(ctx context.Context) (*systemd.Client, error) {
		return systemd.Connect(ctx, systemd.Options{Address: addr})
	}
}

// TestServiceToolsRealSystemd drives service.status and service.control
// against a real systemd in a disposable container.
func TestServiceToolsRealSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	m := nspawntest.Boot(t, nspawntest.Options{})
	units := map[string]string{
		"tools-test.service": "[Unit]\nDescription=tools test service\n[Service]\nExecStart=/bin/sleep infinity\nExecReload=/bin/true\n",
		"tools-fail.service": "[Service]\nType=oneshot\nExecStart=/bin/false\n",
	}
	for name, body := range units {
		if err := os.WriteFile(filepath.Join(m.UnitsDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.SystemdBus = busAt(m.BusAddress)
	h := newHarness(t, opts)
	const unit = "tools-test.service"

	st := ok[ServiceStatus](t, h, mcpwire.ToolServiceStatus, map[string]any{"unit": unit})
	if st.LoadState != "loaded" || st.ActiveState != "inactive" || st.MainPID != 0 || st.Since != nil || st.Description != "tools test service" {
		t.Fatalf("before start: %+v", st)
	}

	steps := []struct {
		action     string
		wantActive string
		wantPID    bool
	}{
		{actionStart, "active", true},
		{actionReload, "active", true},
		{actionRestart, "active", true},
		{actionStop, "inactive", false},
	}
	lastPID := 0
	for _, s := range steps {
		r := ok[ServiceControlResult](t, h, mcpwire.ToolServiceControl, map[string]any{"unit": unit, "action": s.action})
		if r.JobResult != "done" || r.Status.ActiveState != s.wantActive || (r.Status.MainPID > 0) != s.wantPID {
			t.Fatalf("%s: %+v", s.action, r)
		}
		if s.action == actionRestart && r.Status.MainPID == lastPID {
			t.Fatalf("restart kept main pid %d", lastPID)
		}
		if s.wantPID {
			if r.Status.Since == nil {
				t.Fatalf("%s: no since", s.action)
			}
			if _, err := time.Parse(time.RFC3339, *r.Status.Since); err != nil {
				t.Fatalf("since %q: %v", *r.Status.Since, err)
			}
		}
		lastPID = r.Status.MainPID
	}

	e := fails(t, h, mcpwire.ToolServiceControl, map[string]any{"unit": "tools-fail.service", "action": actionStart}, mcpwire.CodeUnavailable)
	if !strings.Contains(e.Message, "failed") {
		t.Fatalf("failed job: %q", e.Message)
	}
	fails(t, h, mcpwire.ToolServiceStatus, map[string]any{"unit": "no-such-unit.service"}, mcpwire.CodeNotFound)
	fails(t, h, mcpwire.ToolServiceControl, map[string]any{"unit": "no-such-unit.service", "action": actionStart}, mcpwire.CodeNotFound)
	// Reloading an inactive unit: systemd ends the job as "invalid".
	fails(t, h, mcpwire.ToolServiceControl, map[string]any{"unit": unit, "action": actionReload}, mcpwire.CodeInvalidArgument)
}
