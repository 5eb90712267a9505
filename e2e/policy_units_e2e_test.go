package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestPolicyUnitsResolvedBySystemd: a deny on reboot.target, alpha.service,
// ssh.service and getty@.service refuses, in a real systemd, the names it
// resolves to those units: systemd's own alias ctrl-alt-del.target, an
// alias made by a symlink (alpha-alias.service, sshd.service), an instance
// of the template, a name without its suffix. Through the backend's HTTP
// and through `mcpctl policy check` (check-policy) alike; a unit no rule
// names is read.
func TestPolicyUnitsResolvedBySystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := newSite(t, 60*time.Second)
	units := s.M.UnitsDir // /etc/systemd/system inside
	if err := os.WriteFile(filepath.Join(units, "alpha.service"), []byte("[Unit]\nDescription=alpha\n[Service]\nType=oneshot\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/systemd/system/alpha.service", filepath.Join(units, "alpha-alias.service")); err != nil {
		t.Fatal(err)
	}
	names := []string{"ctrl-alt-del.target", "alpha-alias.service", "getty@tty1.service", "alpha", "reboot.target"}
	if _, err := os.Stat("/usr/lib/systemd/system/ssh.service"); err == nil {
		// Debian's openssh-server enables ssh.service with Alias=sshd.service.
		if err := os.Symlink("/usr/lib/systemd/system/ssh.service", filepath.Join(units, "sshd.service")); err != nil {
			t.Fatal(err)
		}
		names = append(names, "sshd.service")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.M.Client.DaemonReload(ctx); err != nil {
		t.Fatal(err)
	}
	// What systemd itself says of the aliases (the names the rule sees).
	for _, alias := range []string{"alpha-alias.service", "ctrl-alt-del.target"} {
		if id, all, err := s.M.Client.UnitNames(ctx, alias); err != nil || (id != "alpha.service" && id != "reboot.target") || !strings.Contains(strings.Join(all, " "), alias) {
			t.Fatalf("systemd resolves %s to %q %q (%v)", alias, id, all, err)
		}
	}
	nspawntest.WriteJSON(t, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen, "policy": map[string]any{
		"default": "allow",
		"rules": []map[string]any{{"id": "keep-host", "action": "deny", "reason": "the host's own units",
			"units": []string{"reboot.target", "alpha.service", "ssh.service", "getty@.service"}}},
	}})
	s.restartBackend()

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, tool := range []string{mcpwire.ToolServiceStatus, mcpwire.ToolServiceControl} {
				args := map[string]any{"unit": name}
				if tool == mcpwire.ToolServiceControl {
					args["action"] = "stop"
				}
				te := toolCall(t, s.Backend, "alice", tool, args, nil)
				if te == nil || te.Code != mcpwire.CodePermissionDenied || !strings.Contains(te.Message, "keep-host") {
					t.Errorf("%s %s: %+v, want PERMISSION_DENIED by rule keep-host", tool, name, te)
				}
			}
			a, _ := json.Marshal(map[string]any{"unit": name})
			code, out := s.Run("policy", "check", "--tool", mcpwire.ToolServiceStatus, "--args", string(a))
			if code != 0 || !strings.Contains(out, "deny by rule keep-host") {
				t.Errorf("mcpctl policy check %s: exit %d:\n%s", name, code, out)
			}
		})
	}
	// The backend asked systemd each time (else it logs that the unit
	// files alone decided).
	unit, _, _ := s.Prod()
	if out := s.inContainer("journalctl", "-q", "--no-pager", "-u", unit, "-o", "cat"); strings.Contains(out, "did not resolve") {
		t.Errorf("the backend could not ask systemd:\n%s", out)
	}
	var st struct {
		Unit        string `json:"unit"`
		ActiveState string `json:"activeState"`
	}
	if te := toolCall(t, s.Backend, "alice", mcpwire.ToolServiceStatus, map[string]any{"unit": "systemd-journald.service"}, &st); te != nil || st.ActiveState != "active" {
		t.Errorf("a unit no rule names: %+v %+v", te, st)
	}
	if code, out := s.Run("policy", "check", "--tool", mcpwire.ToolServiceStatus, "--args", `{"unit":"systemd-journald.service"}`); code != 0 || !strings.Contains(out, "allow by rule policy.default") {
		t.Errorf("mcpctl policy check of another unit: exit %d:\n%s", code, out)
	}
}
