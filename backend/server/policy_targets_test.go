package server

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/overdeck/mcp-backend/backend/config"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// policyRefused calls tool through the real server and reports whether
// it was refused by policy rule rule (PERMISSION_DENIED naming it).
func policyRefused(t testing.TB, url, tool string, args any, rule string) (bool, string) {
	t.Helper()
	_, body, err := callRaw(context.Background(), url, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	r := parseReply(t, body)
	if r.errorCode() != string(mcpwire.CodePermissionDenied) {
		return false, string(body)
	}
	e := toolerr.Decode(r.Result.Meta[mcpwire.ErrorMetaKey])
	return strings.Contains(e.Message, "rule "+rule), e.Message
}

// victim starts a process for process.kill to signal (no core dump should
// a quit signal reach it) and returns it with a function that ends it
// with TERM, if it still lives, and reports the signal that ended it.
func victim(t testing.TB) (*exec.Cmd, func() syscall.Signal) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "ulimit -c 0; exec sleep 300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, func() syscall.Signal {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("the process did not end by a signal: %v", err)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() {
			t.Fatalf("the process exited (%v), not by a signal", err)
		}
		return ws.Signal()
	}
}

// TestPolicySignalsAsTheToolReadsThem: a deny rule on KILL and QUIT
// refuses every spelling process.kill accepts for them (white space,
// case, numbers), through the real server, and the process is not
// signalled; a signal no rule names is sent. Without the policy the same
// spellings reach the process (the attempts are real).
func TestPolicySignalsAsTheToolReadsThem(t *testing.T) {
	spellings := []struct {
		name   string
		signal any
		want   syscall.Signal
	}{
		{"leading space", " KILL", syscall.SIGKILL},
		{"trailing space", "KILL ", syscall.SIGKILL},
		{"number with space", "9 ", syscall.SIGKILL},
		{"SIG prefix and space", "SIGQUIT ", syscall.SIGQUIT},
		{"tab", "\tKILL", syscall.SIGKILL},
		{"newline", "SIGKILL\n", syscall.SIGKILL},
		{"lower case", "sigkill", syscall.SIGKILL},
		{"numeric string", "3", syscall.SIGQUIT},
		{"JSON number", 9, syscall.SIGKILL},
	}
	b := startBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "no-hard-kill", Action: policy.Deny, Reason: "ask nicely", Signals: []string{"KILL", "SIGQUIT"}}}
	})
	for _, sp := range spellings {
		t.Run(sp.name, func(t *testing.T) {
			cmd, end := victim(t)
			ok, msg := policyRefused(t, b.url, mcpwire.ToolProcessKill, map[string]any{"pid": cmd.Process.Pid, "signal": sp.signal}, "no-hard-kill")
			if !ok {
				t.Errorf("signal %q was not refused by rule no-hard-kill: %.300s", sp.signal, msg)
			}
			if got := end(); got != syscall.SIGTERM {
				t.Errorf("signal %q: the process ended by %v, want TERM (ours): the tool sent it", sp.signal, got)
			}
		})
	}
	t.Run("a signal no rule names", func(t *testing.T) {
		cmd, end := victim(t)
		if ok, msg := policyRefused(t, b.url, mcpwire.ToolProcessKill, map[string]any{"pid": cmd.Process.Pid, "signal": " HUP"}, "no-hard-kill"); ok {
			t.Fatalf("HUP refused: %s", msg)
		}
		if got := end(); got != syscall.SIGHUP {
			t.Errorf("the process ended by %v, want HUP (the tool's)", got)
		}
	})

	// Negative control: without the policy each spelling is sent.
	open := startBackend(t, nil)
	for _, sp := range spellings {
		t.Run("without policy/"+sp.name, func(t *testing.T) {
			cmd, end := victim(t)
			if ok, msg := policyRefused(t, open.url, mcpwire.ToolProcessKill, map[string]any{"pid": cmd.Process.Pid, "signal": sp.signal}, "no-hard-kill"); ok {
				t.Fatalf("refused without a policy: %s", msg)
			}
			if got := end(); got != sp.want {
				t.Errorf("signal %q: the process ended by %v, want %v", sp.signal, got, sp.want)
			}
		})
	}
}

// TestPolicyUnitsAsSystemdNamesThem: a deny on ssh.service, getty@.service
// and reboot.target refuses, through the real server, the names systemd
// would act on for them: no suffix, an instance of the template, an alias
// in the host's unit files. No system bus here (the container test asks a
// real systemd): the unit files decide. Without the rules the same calls
// reach the tool.
func TestPolicyUnitsAsSystemdNamesThem(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "no-bus"))
	cases := []struct{ name, unit string }{
		{"no suffix", "ssh"},
		{"an instance of a denied template", "getty@tty1.service"},
		{"the name itself", "reboot.target"},
	}
	// systemd ships ctrl-alt-del.target as a symlink to reboot.target.
	if fi, err := os.Lstat("/usr/lib/systemd/system/ctrl-alt-del.target"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		cases = append(cases, struct{ name, unit string }{"an alias in the unit files", "ctrl-alt-del.target"})
	}
	rules := func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "keep-host", Action: policy.Deny, Units: []string{"ssh.service", "getty@.service", "reboot.target"}}}
	}
	b := startBackend(t, rules)
	open := startBackend(t, nil)
	for _, tc := range cases {
		for _, tool := range []string{mcpwire.ToolServiceStatus, mcpwire.ToolServiceControl} {
			args := map[string]any{"unit": tc.unit}
			if tool == mcpwire.ToolServiceControl {
				args["action"] = "stop"
			}
			t.Run(tc.name+"/"+tool, func(t *testing.T) {
				if ok, msg := policyRefused(t, b.url, tool, args, "keep-host"); !ok {
					t.Errorf("%s %s: not refused by rule keep-host: %.300s", tool, tc.unit, msg)
				}
				if ok, msg := policyRefused(t, open.url, tool, args, "keep-host"); ok {
					t.Errorf("%s %s without the rule: refused: %s", tool, tc.unit, msg)
				}
			})
		}
	}
}

// TestPolicyPathsFollowHardLinks: a paths deny rule refuses, through the
// real server, file.read of a hard link to the file it names, as
// files.deny does (one implementation); a symlink too, and a file of its
// own is read. Without the rule the link is read (the attempt is real).
func TestPolicyPathsFollowHardLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "keys", "secret")
	other := filepath.Join(dir, "elsewhere")
	for _, d := range []string{filepath.Dir(secret), other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hard, soft, plain := filepath.Join(other, "hard"), filepath.Join(other, "soft"), filepath.Join(other, "plain")
	if err := os.Link(secret, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, soft); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, func(c *config.Config) {
		c.Policy.Rules = []policy.Rule{{ID: "no-keys", Action: policy.Deny, Reason: "keys", Paths: []string{filepath.Dir(secret)}}}
	})
	open := startBackend(t, nil)
	for _, tc := range []struct {
		name, path string
		refused    bool
	}{
		{"the file", secret, true},
		{"a hard link", hard, true},
		{"a symlink", soft, true},
		{"another file", plain, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := policyRefused(t, b.url, mcpwire.ToolFileRead, map[string]any{"path": tc.path}, "no-keys")
			if ok != tc.refused {
				t.Errorf("file.read %s: refused by no-keys %v, want %v: %.300s", tc.path, ok, tc.refused, msg)
			}
			if strings.Contains(msg, "the secret") {
				t.Errorf("file.read %s returned the secret", tc.path)
			}
		})
	}
	t.Run("without the rule", func(t *testing.T) {
		_, body, err := callRaw(context.Background(), open.url, mcpwire.ToolFileRead, map[string]any{"path": hard})
		if err != nil {
			t.Fatal(err)
		}
		if r := parseReply(t, body); r.errorCode() != "" || !strings.Contains(string(body), "the secret") {
			t.Fatalf("the hard link was not read without the rule: %.300s", body)
		}
	})
}
