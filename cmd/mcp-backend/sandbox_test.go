package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/proctest"
	"github.com/overdeck/mcp-backend/mcpclient"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// canary is what the secrets of these tests hold; no command's output may
// carry it, in any profile.
const canary = "CANARY-7d1f3e"

// sandboxSite is a canary laid out for the sandbox tests, outside /tmp
// (inspect's private /tmp would hide it whatever the masks do) and
// world-readable (so only a mask keeps it from an unprivileged reader): a
// file and a directory in a paths deny rule, the bearer-token file, and
// the backend's own environment.
type sandboxSite struct {
	dir, file, secretDir, token string
}

func newSandboxSite(t testing.TB) sandboxSite {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "mcp-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := sandboxSite{dir: dir, file: filepath.Join(dir, "canary.txt"), secretDir: filepath.Join(dir, "secret"), token: filepath.Join(dir, "token")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	must(os.WriteFile(s.file, []byte(canary+" in a file\n"), 0o644))
	must(os.Mkdir(s.secretDir, 0o755))
	must(os.WriteFile(filepath.Join(s.secretDir, "key"), []byte(canary+" in a directory\n"), 0o644))
	must(os.WriteFile(s.token, []byte(canary+"-bearer-token\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "list0"), []byte(s.file+"\x00"), 0o644))
	return s
}

// config is a backend whose commands run under sandbox.allow = profile
// (no "sandbox" section at all for ""), with the canary's file and
// directory in a deny rule's paths, and its audit file.
func (s sandboxSite) config(t testing.TB, addr, profile string) (cfg, audit string) {
	audit = filepath.Join(t.TempDir(), "audit.jsonl")
	sb := ""
	if profile != "" {
		sb = fmt.Sprintf(`,"sandbox":{"allow":%q}`, profile)
	}
	return writeConfig(t, fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q},
		"audit":{"sink":"file","file":%q},
		"policy":{"default":"allow","rules":[{"id":"secrets","action":"deny","paths":[%q,%q]}]}%s}`,
		addr, s.token, audit, s.file, s.secretDir, sb)), audit
}

// sandboxBackend is the real binary serving a config.
type sandboxBackend struct {
	base   string
	pid    int
	client *mcpclient.Client
}

func startSandboxBackend(t testing.TB, cfg, addr string) sandboxBackend {
	t.Helper()
	var errb syncBuffer
	c := exec.Command(binary, "serve", "--config", cfg)
	// A secret in the backend's own environment.
	c.Env = append(os.Environ(), "MCP_TEST_SECRET="+canary+"-environ")
	// A working directory under /tmp, which inspect's private /tmp hides:
	// a command that names no cwd must still start (in /).
	c.Dir = t.TempDir()
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-exited
		}
	})
	b := sandboxBackend{base: "http://" + addr, pid: c.Process.Pid, client: &mcpclient.Client{Token: canary + "-bearer-token"}}
	proctest.Eventually(t, "a listening backend", func() bool {
		select {
		case <-exited:
			t.Fatalf("backend exited: %s", errb.String())
		default:
		}
		st, _, err := b.client.Get(context.Background(), b.base, "/healthz")
		return err == nil && st == 200
	})
	return b
}

func (b sandboxBackend) shell(t testing.TB, command string) mcpwire.ShellResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := b.client.CallTool(ctx, b.base, mcpwire.ToolShellExec, map[string]any{"command": command, "cwd": "/"})
	if !r.OK() {
		t.Fatalf("shell.exec %q: %v", command, r.Err())
	}
	var res mcpwire.ShellResult
	if err := json.Unmarshal(r.Payload(), &res); err != nil {
		t.Fatalf("shell.exec %q: %v", command, err)
	}
	return res
}

// readers are the allowed programs that read a file some way, each
// pointed at the canary.
func (s sandboxSite) readers() []struct{ name, cmd string } {
	return []struct{ name, cmd string }{
		{"cat", "cat " + s.file},
		{"head", "head " + s.file},
		{"tail", "tail " + s.file},
		{"grep", "grep -h CANARY " + s.file},
		{"grep -r", "grep -r CANARY " + s.dir},
		{"glob", "cat " + s.dir + "/*.txt " + s.secretDir + "/*"},
		{"date -f", "date -f " + s.file},
		{"du --files0-from", "du --files0-from=" + s.dir + "/list0"},
		{"directory file", "cat " + s.secretDir + "/key"},
		{"relative below cwd", "cd " + s.secretDir + " && cat key"},
		{"bearer-token file", "cat " + s.token},
		{"bearer token by grep -r", "grep -r " + canary + "-bearer " + s.dir},
		{"backend environ via PPID", "cat /proc/$PPID/environ"},
		{"backend environ by pid", "cat /proc/%d/environ"},
		{"backend memory maps", "cat /proc/%d/maps; ls -l /proc/%d/fd"},
		{"own environment", "env"},
	}
}

// TestSandboxMasksSecrets: through the real server, under inspect and root,
// and with no sandbox section at all (the default: root), every reader
// returns nothing of a paths deny rule's targets, the bearer-token file
// or the backend's environment. Under an explicit none (the negative
// control) the same readers do return it.
func TestSandboxMasksSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	site := newSandboxSite(t)
	for _, tc := range []struct{ name, allow, profile string }{
		{"inspect", "inspect", "inspect"},
		{"root", "root", "root"},
		{"default", "", "root"},
		{"none", "none", "none"},
	} {
		profile := tc.profile
		t.Run(tc.name, func(t *testing.T) {
			addr := proctest.FreeAddr(t)
			cfg, audit := site.config(t, addr, tc.allow)
			b := startSandboxBackend(t, cfg, addr)
			leaked := 0
			for _, r := range site.readers() {
				cmd := strings.ReplaceAll(r.cmd, "%d", fmt.Sprint(b.pid))
				res := b.shell(t, cmd)
				out := res.Stdout + res.Stderr
				if strings.Contains(out, canary) {
					leaked++
					if profile != "none" {
						t.Errorf("%s: %q returned the canary:\n%s", r.name, cmd, out)
					}
				}
			}
			if profile == "none" && leaked == 0 {
				t.Fatal("no reader saw the canary without a sandbox: the test cannot fail")
			}
			t.Logf("profile %s: %d of %d readers returned the canary", profile, leaked, len(site.readers()))
			checkSandboxRecords(t, b, audit, profile)
		})
	}
}

// checkSandboxRecords: /metrics counts the calls under the profile, and
// every shell.exec call.start record names it.
func checkSandboxRecords(t testing.TB, b sandboxBackend, auditFile, profile string) {
	t.Helper()
	_, body, err := b.client.Get(context.Background(), b.base, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Sandbox mcpwire.SandboxMetrics `json:"sandbox"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Sandbox.Calls[profile] < 1 {
		t.Errorf("/metrics sandbox.calls = %v, want calls under %s", m.Sandbox.Calls, profile)
	}
	f, err := os.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	starts := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r map[string]any
		if json.Unmarshal(sc.Bytes(), &r) != nil || r["MCP_EVENT"] != "call.start" || r["MCP_TOOL"] != mcpwire.ToolShellExec {
			continue
		}
		starts++
		if r["MCP_SANDBOX"] != profile {
			t.Errorf("call.start record with MCP_SANDBOX = %v, want %s", r["MCP_SANDBOX"], profile)
		}
	}
	if starts == 0 {
		t.Errorf("no shell.exec call.start record in %s", auditFile)
	}
}

// TestSandboxInspectIdentity: under inspect a command is nobody, holds no
// capability, cannot gain one (no new privileges), runs under the system
// call filter, writes nothing outside its private /tmp and makes no
// namespace; what reads the host keeps working. Nothing here changes the
// host: the writes go to the test's own directory, and fail.
func TestSandboxInspectIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	site := newSandboxSite(t)
	addr := proctest.FreeAddr(t)
	cfg, _ := site.config(t, addr, "inspect")
	b := startSandboxBackend(t, cfg, addr)
	for _, tc := range []struct {
		name, cmd string
		code      int
		want      string
	}{
		{"not root", "id -u", 0, "65534"},
		{"no capabilities", "grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status", 0, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", 0, "NoNewPrivs:\t1"},
		{"system call filter", "grep '^Seccomp:' /proc/self/status", 0, "Seccomp:\t2"},
		{"clean environment", "echo $PATH $TERM $PAGER $SYSTEMD_PAGER $GIT_PAGER $LESSSECURE $SYSTEMD_EDITOR", 0, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin dumb cat cat cat 1 /bin/false"},
		{"read-only file system", "touch " + site.dir + "/new 2>&1; echo $?", 0, "Read-only file system"},
		{"private writable /tmp", "echo x > /tmp/probe && cat /tmp/probe", 0, "x"},
		{"no user namespace", "unshare -U true 2>&1; echo $?", 0, "Operation not permitted"},
		{"no mount", "unshare -m true 2>&1; echo $?", 0, "Operation not permitted"},
		{"the backend's hidden working directory gives /", "pwd", 0, "/\n"},
		{"ps works", "ps -e -o pid= | wc -l", 0, ""},
		{"df works", "df /", 0, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.shell(t, tc.cmd)
			if res.ExitCode == nil || *res.ExitCode != tc.code || !strings.Contains(res.Stdout, tc.want) {
				t.Fatalf("%q: exit %v, stdout %q, stderr %q; want exit %d and %q", tc.cmd, res.ExitCode, res.Stdout, res.Stderr, tc.code, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(site.dir, "new")); err == nil {
		t.Fatal("a command under inspect wrote to the host")
	}
}

// job runs command as a job and returns how it ended and what it wrote.
func (b sandboxBackend) job(t testing.TB, command string) mcpwire.JobStartResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := b.client.CallTool(ctx, b.base, mcpwire.ToolJobStart, map[string]any{"command": command, "cwd": "/", "waitMs": 30000})
	if !r.OK() {
		t.Fatalf("job.start %q: %v", command, r.Err())
	}
	var res mcpwire.JobStartResult
	if err := json.Unmarshal(r.Payload(), &res); err != nil {
		t.Fatalf("job.start %q: %v", command, err)
	}
	if !res.Job.Done {
		t.Fatalf("job.start %q: still %s after 30 s", command, res.Job.State)
	}
	return res
}

// TestSandboxJobs: a job (process mode here) runs in the same profile as
// shell.exec: its uid, capabilities and environment are the profile's,
// and it reads nothing of the canary, the token or the backend's
// environment; the jobs' state directory is covered too.
func TestSandboxJobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	site := newSandboxSite(t)
	for _, tc := range []struct{ profile, uid, capEff string }{
		{"inspect", "65534\n", "0000000000000000"},
		{"root", "0\n", ""},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			addr := proctest.FreeAddr(t)
			cfg, _ := site.config(t, addr, tc.profile)
			b := startSandboxBackend(t, cfg, addr)
			cmd := fmt.Sprintf("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo TERM=$TERM; cat %s %s/key %s /proc/%d/environ; grep -r %s %s; ls /tmp/mcp-backend-jobs-* 2>&1",
				site.file, site.secretDir, site.token, b.pid, canary, site.dir)
			res := b.job(t, cmd)
			out := res.Stdout.Data + res.Stderr.Data
			if strings.Contains(out, canary) {
				t.Errorf("the job read the canary:\n%s", out)
			}
			if !strings.HasPrefix(res.Stdout.Data, tc.uid) || !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(out, "TERM=dumb") {
				t.Errorf("job output %q: want uid %s, no new privileges, the clean environment", out, tc.uid)
			}
			if tc.capEff != "" && !strings.Contains(out, "CapEff:\t"+tc.capEff) {
				t.Errorf("job output %q: want CapEff %s", out, tc.capEff)
			}
			if strings.Contains(out, "spec.json") || strings.Contains(out, "/v1") {
				t.Errorf("the job saw the jobs' state directory:\n%s", out)
			}
		})
	}
}

// TestSandboxCheckConfig: check-config (the real binary: it starts its
// own sandbox-exec once per profile) passes a config whose profiles this
// host can enforce.
func TestSandboxCheckConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	cfg := writeConfig(t, `{"sandbox":{"allow":"inspect","approved":"root","profiles":{"web":{"user":"nobody","capabilities":["CAP_NET_BIND_SERVICE"],"readOnly":true,"writable":["/var/tmp"],"network":false,"seccomp":true}}},
		"policy":{"rules":[{"id":"web","action":"allow","commands":["nginx -t"],"sandbox":"web"}]}}`)
	out, err := exec.Command(binary, "check-config", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok") {
		t.Fatalf("check-config: %v\n%s", err, out)
	}
	// A process that cannot make a mount namespace (no CAP_SYS_ADMIN)
	// cannot enforce any profile: check-config and serve refuse, naming
	// the key, and nothing runs with less.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to drop CAP_SYS_ADMIN with")
	}
	// The default config too: root by default, refused rather than run
	// without the masks; an explicit none starts.
	def := writeConfig(t, `{"listen":"127.0.0.1:0"}`)
	none := writeConfig(t, `{"sandbox":{"allow":"none","approved":"none"}}`)
	for _, tc := range []struct {
		sub, cfg, want string
		code           int
	}{
		{"check-config", cfg, `sandbox.allow = "inspect": this host or process cannot enforce the profile`, 2},
		{"serve", cfg, `sandbox.allow = "inspect": this host or process cannot enforce the profile`, 2},
		{"check-config", def, `sandbox.allow = "root": this host or process cannot enforce the profile`, 2},
		{"serve", def, `sandbox.allow = "root": this host or process cannot enforce the profile`, 2},
		{"check-config", none, `warning: sandbox.allow = "none"`, 0},
	} {
		c := exec.Command(setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--", binary, tc.sub, "--config", tc.cfg)
		out, err = c.CombinedOutput()
		if c.ProcessState == nil || c.ProcessState.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %s without CAP_SYS_ADMIN: %v\n%s\nwant exit %d and %q", tc.sub, tc.cfg, err, out, tc.code, tc.want)
		}
	}
}

// TestSandboxRuleChoosesProfile: a rule's sandbox chooses a custom
// profile (nobody keeping CAP_NET_BIND_SERVICE as an ambient capability,
// no network, the file system read-only) for the commands it allows;
// what no rule names runs in sandbox.allow.
func TestSandboxRuleChoosesProfile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	site := newSandboxSite(t)
	addr := proctest.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`{"listen":%q,"auth":{"bearerTokenFile":%q},
		"sandbox":{"allow":"inspect","profiles":{"web":{"user":"nobody","capabilities":["CAP_NET_BIND_SERVICE"],"readOnly":true,"network":false,"seccomp":true},
			"isolated":{"user":"dynamic","readOnly":true,"seccomp":true,"network":true}}},
		"policy":{"default":"allow","rules":[{"id":"web-checks","action":"allow","commands":["grep *"],"sandbox":"web"},
			{"id":"ids","action":"allow","commands":["id *"],"sandbox":"isolated"},
			{"id":"secrets","action":"deny","paths":[%q]}]}}`, addr, site.token, site.file))
	b := startSandboxBackend(t, cfg, addr)
	web := b.shell(t, "grep -E '^Cap(Eff|Amb)|^Uid|:' /proc/self/status /proc/net/dev "+site.file)
	for _, want := range []string{"CapEff:\t0000000000000400", "CapAmb:\t0000000000000400", "Uid:\t65534"} {
		if !strings.Contains(web.Stdout, want) {
			t.Errorf("under the rule's profile: %q lacks %q", web.Stdout, want)
		}
	}
	ifaces := 0
	for _, l := range strings.Split(web.Stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, "/proc/net/dev:"); ok && !strings.Contains(rest, "|") {
			ifaces++
			if !strings.HasPrefix(strings.TrimSpace(rest), "lo:") {
				t.Errorf("the profile without network sees interface %q", strings.TrimSpace(rest))
			}
		}
	}
	if ifaces == 0 || strings.Contains(web.Stdout+web.Stderr, canary) {
		t.Errorf("no interface at all, or the canary: %q %q", web.Stdout, web.Stderr)
	}
	if def := b.shell(t, "whoami"); def.Stdout != "nobody\n" {
		t.Errorf("no rule: %q, want inspect's user", def.Stdout)
	}
	// A dynamic user: each command a uid of its own, no account's.
	a, c := b.shell(t, "id -u -- "), b.shell(t, "id -g -- ")
	if !strings.HasPrefix(a.Stdout, "21473") || !strings.HasPrefix(c.Stdout, "21473") || a.Stdout == c.Stdout {
		t.Errorf("two commands under a dynamic user: uid %q, gid %q: want two uids from 2147352576", a.Stdout, c.Stdout)
	}
}

// TestSandboxGroupKill: through the helper, procgroup still ends the whole
// command: a timeout kills the group, and a process that left it (setsid)
// is swept when the shell exits, under inspect (another uid) and root.
func TestSandboxGroupKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (a mount namespace, other credentials)")
	}
	site := newSandboxSite(t)
	for _, profile := range []string{"inspect", "root"} {
		t.Run(profile, func(t *testing.T) {
			addr := proctest.FreeAddr(t)
			cfg, _ := site.config(t, addr, profile)
			b := startSandboxBackend(t, cfg, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r := b.client.CallTool(ctx, b.base, mcpwire.ToolShellExec, map[string]any{"command": "sleep 30", "timeoutMs": 300})
			var res mcpwire.ShellResult
			if err := json.Unmarshal(r.Payload(), &res); err != nil || !res.TimedOut {
				t.Fatalf("sleep 30 with timeoutMs 300: %+v (%v), want timedOut", res, err)
			}
			arg := fmt.Sprintf("%d.%d", 300+len(profile), os.Getpid()%1000)
			if out := b.shell(t, "setsid sleep "+arg+" >/dev/null 2>&1 & echo started"); out.Stdout != "started\n" {
				t.Fatalf("the escapee did not start: %+v", out)
			}
			proctest.Eventually(t, "the escaped sleep gone", func() bool { return !sleeping(arg) })
		})
	}
}

// sleeping says whether a process `sleep arg` runs on this machine.
func sleeping(arg string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == "sleep\x00"+arg+"\x00" {
			return true
		}
	}
	return false
}

// TestSandboxHelperStartsEarly: `mcp-backend sandbox-exec` is handled in
// package sandbox's init, before main and before the packages initialised
// after it: the command-line parser and the markdown renderer never
// initialise on a command's path (GODEBUG=inittrace=1 lists each package
// initialised), while a normal start does initialise them (the test can
// fail). A bad command line exits 2 with the helper's own usage.
func TestSandboxHelperStartsEarly(t *testing.T) {
	heavy := []string{"github.com/russross/blackfriday", "github.com/urfave/cli"}
	trace := func(args ...string) (string, int) {
		c := exec.Command(binary, args...)
		c.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		out, _ := c.CombinedOutput()
		return string(out), c.ProcessState.ExitCode()
	}
	out, code := trace("sandbox-exec")
	if code != 2 || !strings.Contains(out, "sandbox-exec: usage: sandbox-exec --spec JSON -- PROGRAM") {
		t.Fatalf("sandbox-exec without a spec: exit %d\n%s", code, out)
	}
	for _, p := range heavy {
		if strings.Contains(out, "init "+p) {
			t.Errorf("the helper initialised %s:\n%s", p, out)
		}
	}
	full, _ := trace("--version")
	for _, p := range heavy {
		if !strings.Contains(full, "init "+p) {
			t.Errorf("--version did not initialise %s: the test cannot tell:\n%s", p, full)
		}
	}
	t.Logf("packages initialised: helper %d, --version %d", strings.Count(out, "init "), strings.Count(full, "init "))
}
