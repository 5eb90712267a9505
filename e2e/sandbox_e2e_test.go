package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// sandboxConfig makes the site's backend run every command in profile
// (sandbox.allow) and restarts it.
func (s *site) sandboxConfig(profile string) {
	s.T.Helper()
	nspawntest.WriteJSON(s.T, s.Cfg.Backend.Config, map[string]any{"listen": s.Cfg.Backend.Listen,
		"sandbox": map[string]any{"allow": profile, "approved": "root"},
		"policy": map[string]any{"default": "allow", "rules": []map[string]any{
			{"id": "secrets", "action": "deny", "paths": []string{filepath.Join(s.Dir, "canary")}}}}})
	s.restartBackend()
}

// shell runs command by shell.exec and returns its result.
func (s *site) shell(command string) mcpwire.ShellResult {
	s.T.Helper()
	var r mcpwire.ShellResult
	s.job("e2e", mcpwire.ToolShellExec, map[string]any{"command": command, "cwd": "/"}, &r)
	return r
}

// jobRun runs command as a job (a transient unit) to its end and returns
// its stdout.
func (s *site) jobRun(command string) string {
	s.T.Helper()
	var st mcpwire.JobStartResult
	s.job("e2e", mcpwire.ToolJobStart, map[string]any{"command": command, "cwd": "/"}, &st)
	s.waitJob("e2e", st.Job.ID)
	return string(s.allOutput("e2e", st.Job.ID, "stdout"))
}

func shellExit(r mcpwire.ShellResult) int {
	if r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}

// identity is what a command reads back about itself: uid, capability
// sets, no-new-privileges, the root mount's options and its environment.
const identity = `id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; findmnt -n -o OPTIONS / | cut -d, -f1; echo TERM=$TERM PAGER=$PAGER HOME=$HOME`

// TestSandboxInSystemd: in a real systemd, under inspect every
// host-changing command fails and the container is unchanged while the
// readers keep working; a shell.exec and a job (a transient unit) read
// back their identity under inspect and under root.
//
// The container shares the machine's clock and network namespace, and
// systemd-nspawn already withholds CAP_SYS_TIME and CAP_NET_ADMIN from it:
// date -s, ip link and ss -K fail there even without a sandbox (the test
// cannot tell the sandbox's refusal from nspawn's for those three, and
// running them is safe for the machine either way). The others fail only
// because of the profile: the negative control runs them under root.
func TestSandboxInSystemd(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a container")
	}
	s := newSite(t, time.Hour)
	s.sandboxConfig("inspect")
	journald := strings.TrimSpace(s.inContainer("systemctl", "show", "-P", "MainPID", "systemd-journald.service"))

	// Archived journal files for the vacuum to find, counted.
	s.inContainer("journalctl", "--rotate")
	archived := []string{"sh", "-c", "find /run/log/journal /var/log/journal -name '*@*.journal' 2>/dev/null | wc -l"}
	archivedBefore := strings.TrimSpace(s.inContainer(archived...))
	if archivedBefore == "0" {
		t.Fatal("no archived journal file after journalctl --rotate: the vacuum case cannot fail")
	}
	time.Sleep(2 * time.Second) // older than --vacuum-time=1s
	hostChanging := []struct {
		name, cmd string
		// unchanged checks the container after the command (argv, and
		// what its output must contain or not).
		check   []string
		want    string
		notWant string
		// stateOnly: judged by the container's state alone (the
		// program says nothing useful in its exit status).
		stateOnly bool
	}{
		{"date -s", "date -s 2001-02-03", []string{"date", "+%Y"}, "", "2001", false},
		{"ip link set lo down", "ip link set lo down", []string{"ip", "-o", "link", "show", "lo"}, "UP", "", false},
		{"ip netns add", "ip netns add sbx-test", []string{"sh", "-c", "ip netns list; ls /run/netns 2>/dev/null"}, "", "sbx-test", false},
		{"touch /etc/x", "touch /etc/sbx-test", []string{"sh", "-c", "ls /etc/sbx-test 2>&1"}, "No such file", "", false},
		{"kill a root process", "kill -CONT " + journald, nil, "", "", false},
		{"systemctl stop", "systemctl stop systemd-journald.service", []string{"systemctl", "show", "-P", "MainPID", "systemd-journald.service"}, journald, "", false},
		{"journalctl --rotate", "journalctl --rotate", nil, "", "", false},
		{"journalctl --vacuum-time", "journalctl --vacuum-time=1s", archived, archivedBefore, "", true},
		// This kernel may lack SOCK_DESTROY (EINVAL either way): the
		// backend's own sockets must still answer, which the next
		// calls check.
		{"ss -K", "ss -K dport = :1", nil, "", "", true},
	}
	for _, tc := range hostChanging {
		t.Run("inspect refuses "+tc.name, func(t *testing.T) {
			r := s.shell(tc.cmd)
			out := r.Stdout + r.Stderr
			refused := shellExit(r) != 0 || strings.Contains(out, "ermission") || strings.Contains(out, "Read-only") || strings.Contains(out, "Failed")
			if !refused && !tc.stateOnly {
				t.Errorf("%q under inspect: exit %d, output %q: want a refusal", tc.cmd, shellExit(r), out)
			}
			t.Logf("%q: exit %d: %s", tc.cmd, shellExit(r), strings.TrimSpace(out))
			if tc.check != nil {
				got := s.inContainer(tc.check...)
				if tc.want != "" && !strings.Contains(got, tc.want) || tc.notWant != "" && strings.Contains(got, tc.notWant) {
					t.Errorf("after %q the container changed: %v says %q", tc.cmd, tc.check, got)
				}
			}
		})
	}
	for _, cmd := range []string{"ps -e", "ss -tln", "ip addr", "df /", "journalctl -u systemd-journald --no-pager -n 3", "systemctl status systemd-journald --no-pager"} {
		t.Run("inspect reads "+cmd, func(t *testing.T) {
			if r := s.shell(cmd); shellExit(r) != 0 || r.Stdout == "" {
				t.Errorf("%q under inspect: exit %d, stdout %q, stderr %q", cmd, shellExit(r), r.Stdout, r.Stderr)
			}
		})
	}
	inspectShell := s.shell(identity)
	inspectJob := s.jobRun(identity)
	t.Logf("inspect shell.exec:\n%s", inspectShell.Stdout)
	t.Logf("inspect job:\n%s", inspectJob)
	for what, out := range map[string]string{"shell.exec": inspectShell.Stdout, "job": inspectJob} {
		for _, want := range []string{"65534\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "\nro\n", "TERM=dumb PAGER=cat"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s under inspect: %q lacks %q", what, out, want)
			}
		}
	}

	// What systemd scores a job's unit at: the unit is the supervisor's
	// (root, to set the profile up), carrying what systemd can enforce
	// of the profile around it.
	inspectScore := s.jobUnitExposure()

	// The negative control and root's own identity: the same commands
	// that inspect refused (those nspawn itself allows) work under root.
	s.sandboxConfig("root")
	for _, tc := range []struct{ name, cmd string }{
		{"touch /etc/x", "touch /etc/sbx-root && rm /etc/sbx-root"},
		{"kill a root process", "kill -CONT " + journald},
	} {
		if r := s.shell(tc.cmd); shellExit(r) != 0 {
			t.Errorf("%q under root: exit %d, %s: the negative control failed", tc.cmd, shellExit(r), r.Stderr)
		}
	}
	// The vacuum inspect could not do, root does: the case can fail.
	if r := s.shell("journalctl --vacuum-time=1s"); shellExit(r) != 0 || strings.TrimSpace(s.inContainer(archived...)) == archivedBefore {
		t.Errorf("journalctl --vacuum-time=1s under root: exit %d, %s; archived journals still %s: the negative control failed", shellExit(r), r.Stderr, archivedBefore)
	}
	// The canary of a deny rule under root: covered by its path, and not
	// reached through the host's view in another root process's
	// /proc/PID/root (the kernel wants the reader's capabilities to cover
	// the target's, and root keeps no CAP_SYS_PTRACE).
	canary := filepath.Join(s.Dir, "canary")
	if err := os.WriteFile(canary, []byte("CANARY-e2e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := s.shell("cat " + canary); strings.Contains(r.Stdout, "CANARY") {
		t.Errorf("root read the canary of a deny rule: %q", r.Stdout)
	}
	via := s.shell("cat /proc/" + journald + "/root" + canary + " /proc/1/root" + canary)
	if strings.Contains(via.Stdout, "CANARY") {
		t.Errorf("root read the canary through /proc/PID/root: %q", via.Stdout)
	}
	t.Logf("root through another process's /proc/PID/root: %q", via.Stderr)
	// The unit of a root job carries less: its exposure is the
	// negative control of inspect's.
	if rootScore := s.jobUnitExposure(); inspectScore >= rootScore {
		t.Errorf("systemd-analyze security: an inspect job's unit is exposed %.1f, a root job's %.1f: want inspect's lower", inspectScore, rootScore)
	}
	rootShell := s.shell(identity)
	rootJob := s.jobRun(identity)
	t.Logf("root shell.exec:\n%s", rootShell.Stdout)
	t.Logf("root job:\n%s", rootJob)
	for what, out := range map[string]string{"shell.exec": rootShell.Stdout, "job": rootJob} {
		if !strings.HasPrefix(out, "0\n") || !strings.Contains(out, "\nrw\n") || !strings.Contains(out, "TERM=dumb") || strings.Contains(out, "CapEff:\t0000000000000000") {
			t.Errorf("%s under root: %q: want uid 0, capabilities, a writable root and the clean environment", what, out)
		}
	}
}

// jobUnitExposure starts a job that sleeps, scores its running unit with
// systemd-analyze security (0 to 10, lower is less exposed), logs the
// report and returns the overall exposure.
func (s *site) jobUnitExposure() float64 {
	s.T.Helper()
	var st mcpwire.JobStartResult
	s.job("e2e", mcpwire.ToolJobStart, map[string]any{"command": "sleep 5", "cwd": "/"}, &st)
	defer s.waitJob("e2e", st.Job.ID)
	if st.Job.Unit == "" {
		s.T.Fatalf("job %s has no unit: not under systemd", st.Job.ID)
	}
	out := s.inContainer("sh", "-c", "systemd-analyze security --no-pager "+st.Job.Unit+" 2>&1")
	s.T.Logf("systemd-analyze security %s:\n%s", st.Job.Unit, out)
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		s.T.Fatalf("no overall exposure in %q", out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		s.T.Fatal(err)
	}
	return v
}
