package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/internal/golden"
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

// TestApprovalsShowWholeCall: approvals list and show put before the
// operator everything the call will run (every part of the command, env,
// cwd, every argument) and each part with the rule that judged it; the
// list fits 80 columns with every cut marked, --wide and --json are
// whole, and control characters are shown escaped.
func TestApprovalsShowWholeCall(t *testing.T) {
	dir := t.TempDir()
	st, err := approvals.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	expires := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	long := "apt-get update; " + strings.Repeat("echo padding-the-line; ", 6) + "cat > /etc/apt/apt.conf.d/99x <<'EOF'\nAPT::Update::Pre-Invoke {\"touch /tmp/x\";};\nEOF\nprintf '\x1b[2K'"
	for _, r := range []approvals.Record{
		{Approval: mcpwire.Approval{ID: "a0000000000000001", Tool: mcpwire.ToolShellExec, Target: "apt-get update", Rule: "ask-apt", Reason: "package changes",
			PrincipalKind: "asserted", Principal: "alice", Conversation: "c0ffee",
			Arguments: json.RawMessage(`{"command":"APT_CONFIG=/dev/stdin apt-get update <<< 'x'; touch /tmp/x","cwd":"/srv","env":{"B":"2\nEVIL=1","DEBIAN_FRONTEND":"noninteractive"},"timeoutMs":60000}`),
			Parts: []mcpwire.JudgedPart{
				{Text: "APT_CONFIG=/dev/stdin", Action: "ask", Rule: "policy.opaque", Reason: "assigning APT_CONFIG changes what the shell runs"},
				{Text: "apt-get update", Action: "ask", Rule: "ask-apt", Reason: "package changes"},
				{Text: "touch /tmp/x", Action: "allow", Rule: "policy.default", Reason: "no rule matches"}},
			CreatedAt: created, ExpiresAt: expires}},
		{Approval: mcpwire.Approval{ID: "a0000000000000002", Tool: mcpwire.ToolShellExec, Target: "apt-get update", Rule: "ask-apt", Reason: "package changes",
			PrincipalKind: "oauth", Principal: "https://issuer.example/ google-oauth2|1234567890", Conversation: "c0ffee",
			Arguments: mustJSON(t, map[string]any{"command": long}),
			Parts: []mcpwire.JudgedPart{
				{Text: "apt-get update", Action: "ask", Rule: "ask-apt"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "echo padding-the-line", Action: "allow", Rule: "policy.default"},
				{Text: "cat", Action: "allow", Rule: "policy.default"},
				{Text: "> /etc/apt/apt.conf.d/99x", Action: "ask", Rule: "policy.opaque"},
				{Text: "printf '\x1b[2K'", Action: "allow", Rule: "policy.default"}},
			CreatedAt: created.Add(time.Second), ExpiresAt: expires}},
		{Approval: mcpwire.Approval{ID: "a0000000000000003", Tool: mcpwire.ToolFileWrite, Target: "/etc/sudoers.d/x", Rule: "ask-etc",
			PrincipalKind: "asserted", Principal: "bob", Conversation: "c0ffee",
			Arguments: json.RawMessage(`{"content":"bob ALL=(ALL) NOPASSWD: ALL\n","mode":"0440","path":"/etc/sudoers.d/x"}`),
			CreatedAt: created.Add(2 * time.Second), ExpiresAt: expires}},
	} {
		if err := st.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	age := regexp.MustCompile(`(pending) +\d+d  `)
	for _, tc := range []struct {
		golden string
		args   []string
		width  int
	}{
		{"approvals-list.golden", []string{"approvals", "list"}, 80},
		{"approvals-list-wide.golden", []string{"approvals", "list", "--wide"}, 0},
		{"approvals-show.golden", []string{"approvals", "show", "a0000000000000002"}, 0},
		{"approvals-show-file.golden", []string{"approvals", "show", "a0000000000000003"}, 0},
		{"approvals-show-env.golden", []string{"approvals", "show", "a0000000000000001"}, 0},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			code, out, errOut := runCtl(t, append(tc.args, "--dir", dir)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			out = age.ReplaceAllString(out, "$1    AGE  ") // the records' age changes with the day
			if strings.ContainsRune(out, '\x1b') {
				t.Errorf("a raw escape character reached the terminal:\n%s", out)
			}
			for _, l := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(l); tc.width > 0 && n > tc.width {
					t.Errorf("%d columns: %q", n, l)
				}
			}
			golden.Check(t, tc.golden, []byte(out))
		})
	}
	code, out, _ := runCtl(t, "approvals", "list", "--dir", dir, "--json")
	var list struct{ Approvals []approvals.Record }
	var args struct{ Command string }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Approvals) != 3 || json.Unmarshal(list.Approvals[1].Arguments, &args) != nil ||
		args.Command != long || len(list.Approvals[1].Parts) != 10 {
		t.Fatalf("list --json (exit %d) is not whole: %s", code, out)
	}
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
