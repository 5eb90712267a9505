package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/mcpwire"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/units"
)

func runCtl(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"mcpctl"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestApprovalsListShowDecide: mcpctl approvals over a store as the
// backend writes it: list and show the pending call, approve it once; a
// second decision, an expired one and a bad id fail with the next command.
func TestApprovalsListShowDecide(t *testing.T) {
	dir := t.TempDir()
	st, err := approvals.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	mk := func(exp time.Duration, cmd string) string {
		r := approvals.Record{Approval: mcpwire.Approval{ID: approvals.NewID(), Tool: mcpwire.ToolShellExec, Target: cmd, Rule: "ask-upgrades",
			PrincipalKind: "asserted", Principal: "alice", Conversation: "c0ffee", Arguments: json.RawMessage(`{"command":"` + cmd + `"}`),
			CreatedAt: now, ExpiresAt: now.Add(exp)}, Digest: "d"}
		if err := st.Create(r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	live, old := mk(time.Hour, "apt-get upgrade -y"), mk(-time.Second, "apt-get install x")

	code, out, _ := runCtl(t, "approvals", "list", "--dir", dir, "--json")
	var list struct{ Approvals []approvals.Record }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Approvals) != 1 || list.Approvals[0].ID != live {
		t.Fatalf("list (exit %d): %s", code, out)
	}
	if code, out, _ = runCtl(t, "approvals", "list", "--dir", dir, "--all"); code != 0 || !strings.Contains(out, old) || !strings.Contains(out, "expired") {
		t.Fatalf("list --all (exit %d): %s", code, out)
	}
	if code, out, _ = runCtl(t, "approvals", "show", live, "--dir", dir); code != 0 || !strings.Contains(out, "apt-get upgrade -y") || !strings.Contains(out, "ask-upgrades") {
		t.Fatalf("show (exit %d): %s", code, out)
	}
	if code, out, _ = runCtl(t, "approvals", "approve", live, "--dir", dir, "--json"); code != 0 || !strings.Contains(out, `"status": "approved"`) {
		t.Fatalf("approve (exit %d): %s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"approvals", "deny", live}, deploy.CodeFailed, "already decided"},
		{[]string{"approvals", "approve", old}, deploy.CodeFailed, "expired"},
		{[]string{"approvals", "approve", "nope"}, deploy.CodeUsage, "not an approval ID"},
		{[]string{"approvals", "approve"}, deploy.CodeUsage, "want one approval ID"},
	} {
		code, _, errOut := runCtl(t, append(tc.args, "--dir", dir)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q: %s", tc.args, code, tc.code, tc.want, errOut)
		}
	}
	if r, _ := st.Get(live); r.Status != mcpwire.ApprovalApproved || r.DecidedBy != "operator" {
		t.Fatalf("stored: %+v", r)
	}
}

// TestApprovalsDefaultDir: without --dir, mcpctl approvals reads approvals/
// in the StateDirectory= of the production slot template mcpctl renders for
// its config's backend.unit, where the backend keeps them.
func TestApprovalsDefaultDir(t *testing.T) {
	for _, unit := range []string{"mcp-backend.service", "mcp-blue.service"} {
		t.Run(unit, func(t *testing.T) {
			cfg := ctlconfig.Default()
			cfg.Backend.Unit = unit
			cfg.Tunnels = nil // the backend's unit is the point
			us, err := units.Render(units.Params{Spec: unitSpec(t, cfg), MCPCtl: "/usr/local/bin/mcpctl"})
			if err != nil {
				t.Fatal(err)
			}
			var sd string
			for _, u := range us {
				if u.Name == units.SlotTemplate(unit) {
					for _, l := range strings.Split(string(u.Content), "\n") {
						if v, ok := strings.CutPrefix(l, "StateDirectory="); ok {
							sd = v
						}
					}
				}
			}
			if want := filepath.Join("/var/lib", sd, "approvals"); sd == "" || defaultApprovalsDir(unit) != want {
				t.Fatalf("default %s, unit's StateDirectory=%q", defaultApprovalsDir(unit), sd)
			}
		})
	}
}
