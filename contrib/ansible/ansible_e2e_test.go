package ansible_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/internal/nspawn/nspawntest"
)

// host is one managed host (see nspawntest.Hosts). Nothing is installed
// on it: the install playbook does that.
type host struct {
	*nspawntest.Host
}

// hostState is what a host runs, observed by the test itself (never
// through the collection): the current release and its binary's digest,
// a pending cutover, the units' InvocationIDs, the files in the step dir.
type hostState struct {
	Version, Digest string
	Pending         bool
	Active          string
	Backend         string
	Tunnels         []string
	Files           int
}

func (h *host) state(t testing.TB) hostState {
	t.Helper()
	o := h.Observe(t)
	s := hostState{Version: o.Version, Digest: o.Digest, Pending: o.Pending, Active: o.Active, Backend: o.Backend, Tunnels: o.Tunnels}
	_ = filepath.Walk(h.FleetDir(), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			s.Files++
		}
		return nil
	})
	return s
}

// testHosts is the controller's side: the collection, an inventory of
// the hosts, the key and known_hosts, ansible's own directories.
type testHosts struct {
	dir, inventory, ctl string
	env                 []string
	hosts               []*host
}

func newTestHosts(t *testing.T, n int) *testHosts {
	t.Helper()
	if testing.Short() {
		t.Skip("boots containers: not with -short")
	}
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		nspawntest.SkipOrFail(t, "ansible-playbook not installed (Debian: ansible-core, installed by scripts/ensure-deps.sh)")
	}
	nspawntest.RequireSSH(t)
	th := &testHosts{dir: t.TempDir()}
	th.ctl = nspawntest.BuildBinary(t, "./cmd/mcpctl", "ansible-e2e")
	key, pub := nspawntest.SSHKey(t, th.dir, "id_ansible")
	var known strings.Builder
	invHosts := map[string]any{}
	for _, nh := range nspawntest.Hosts(t, n, nspawntest.HostOptions{PublicKey: pub}) {
		h := &host{nh}
		th.hosts = append(th.hosts, h)
		known.WriteString(h.SSHD.KnownHost + "\n")
		invHosts[h.Name] = map[string]any{
			"ansible_host": "127.0.0.1", "ansible_port": h.SSHD.Port,
			"mcp_config": h.CfgPath, "mcp_mcpctl": h.Mcpctl(), "mcp_step_dir": h.FleetDir(),
		}
	}
	kh := filepath.Join(th.dir, "known_hosts")
	if err := os.WriteFile(kh, []byte(known.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// JSON is YAML: the yaml inventory plugin reads it. The SSH options
	// are the fleet's: no user config, only this key, strict host keys.
	th.inventory = filepath.Join(th.dir, "inventory.json")
	nspawntest.WriteJSON(t, th.inventory, map[string]any{"all": map[string]any{"children": map[string]any{"mcp_backends": map[string]any{
		"hosts": invHosts,
		"vars": map[string]any{
			"ansible_user": "root", "ansible_ssh_private_key_file": key,
			"ansible_ssh_common_args":    "-F none -o UserKnownHostsFile=" + kh + " -o GlobalKnownHostsFile=none -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes",
			"ansible_python_interpreter": "/usr/bin/python3",
		},
	}}}})
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// The control sockets' path must stay short (sun_path).
	cp, err := os.MkdirTemp("", "ans-cp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cp) })
	th.env = append(os.Environ(),
		"ANSIBLE_COLLECTIONS_PATH="+wd,
		"ANSIBLE_CONFIG="+filepath.Join(th.dir, "no-ansible.cfg"),
		"ANSIBLE_HOME="+filepath.Join(th.dir, "ansible-home"),
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(th.dir, "ansible-tmp"),
		"ANSIBLE_SSH_CONTROL_PATH_DIR="+cp,
		"ANSIBLE_HOST_KEY_CHECKING=True",
		"ANSIBLE_RETRY_FILES_ENABLED=False",
		"ANSIBLE_PIPELINING=True",
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_FORCE_COLOR=0",
	)
	return th
}

// recap is one host's line of the PLAY RECAP.
type recap struct{ OK, Changed, Unreachable, Failed, Skipped int }

var recapRE = regexp.MustCompile(`(?m)^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)`)

func parseRecap(out string) map[string]recap {
	m := map[string]recap{}
	for _, g := range recapRE.FindAllStringSubmatch(out, -1) {
		n := make([]int, 5)
		for i := range n {
			n[i], _ = strconv.Atoi(g[i+2])
		}
		m[g[1]] = recap{n[0], n[1], n[2], n[3], n[4]}
	}
	return m
}

// playbook runs ansible-playbook with the collection's playbook name
// (overdeck.mcp.NAME) and args to its end; it logs the PLAY RECAP and the
// run's duration.
func (th *testHosts) playbook(t testing.TB, name string, args ...string) (int, string, map[string]recap) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	argv := append([]string{"-i", th.inventory, "overdeck.mcp." + name}, args...)
	cmd := exec.CommandContext(ctx, "ansible-playbook", argv...)
	cmd.Env = th.env
	cmd.Dir = th.dir
	t0 := time.Now()
	b, err := cmd.CombinedOutput()
	took := time.Since(t0).Round(100 * time.Millisecond)
	out := string(b)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("ansible-playbook %v: %v\n%s", argv, err, out)
	}
	rec := out
	if i := strings.Index(out, "PLAY RECAP"); i >= 0 {
		rec = out[i:]
	}
	t.Logf("ansible-playbook %s: exit %d in %s\n%s", strings.Join(argv[2:], " "), code, took, rec)
	if t.Failed() || code != 0 {
		t.Logf("full output:\n%s", out)
	}
	return code, out, parseRecap(out)
}

func (th *testHosts) states(t testing.TB) map[string]hostState {
	t.Helper()
	out := map[string]hostState{}
	for _, h := range th.hosts {
		out[h.Name] = h.state(t)
	}
	return out
}

// expect checks that every host runs the build want says (host -> build
// path), healthy enough to be active, with no cutover pending, its tunnels
// never restarted, and its backend restarted exactly when restarted says.
func (th *testHosts) expect(t testing.TB, before map[string]hostState, want map[string]string, restarted ...string) map[string]hostState {
	t.Helper()
	now := th.states(t)
	for _, h := range th.hosts {
		s, b := now[h.Name], before[h.Name]
		d, err := buildinfo.FileDigest(want[h.Name])
		if err != nil {
			t.Fatal(err)
		}
		if s.Digest != d {
			t.Errorf("%s runs %q (%s), want %s", h.Name, s.Version, s.Digest, want[h.Name])
		}
		if s.Active != "active" {
			t.Errorf("%s: production is %s, want active", h.Name, s.Active)
		}
		if s.Pending {
			t.Errorf("%s: a cutover is still pending", h.Name)
		}
		if strings.Join(s.Tunnels, ",") != strings.Join(b.Tunnels, ",") {
			t.Errorf("%s: tunnels restarted: %v -> %v", h.Name, b.Tunnels, s.Tunnels)
		}
		wantRestart := false
		for _, r := range restarted {
			wantRestart = wantRestart || r == h.Name
		}
		if got := s.Backend != b.Backend; got != wantRestart {
			t.Errorf("%s: backend restarted = %v (InvocationID %s -> %s), want %v", h.Name, got, b.Backend, s.Backend, wantRestart)
		}
	}
	return now
}

// TestAnsibleCollectionInContainers runs the collection's playbooks with
// ansible-playbook against three real hosts over SSH, one scenario after
// the other on the same hosts, each from the state the previous left
// (asserted).
func TestAnsibleCollectionInContainers(t *testing.T) {
	th := newTestHosts(t, 3)
	h1, h2, h3 := th.hosts[0].Name, th.hosts[1].Name, th.hosts[2].Name
	v1 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v1")
	v2 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v2")
	v3 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v3")
	all := func(b string) map[string]string { return map[string]string{h1: b, h2: b, h3: b} }
	rollout := func(t testing.TB, build string, extra ...string) (int, string, map[string]recap) {
		return th.playbook(t, "rolling_update", append([]string{"-e", "mcp_build=" + build, "-e", "mcp_mcpctl_src=" + th.ctl,
			"-e", "mcp_stress_duration=3s"}, extra...)...)
	}
	var before map[string]hostState

	t.Run("install v1 on every host", func(t *testing.T) {
		code, _, rec := th.playbook(t, "install", "-e", "mcp_build="+v1, "-e", "mcp_mcpctl_src="+th.ctl)
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		for _, h := range th.hosts {
			if r := rec[h.Name]; r.Failed != 0 || r.Changed == 0 {
				t.Errorf("%s: recap %+v, want changes and no failure", h.Name, r)
			}
		}
		before = th.states(t)
		before = th.expect(t, before, all(v1))
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("check mode changes nothing", func(t *testing.T) {
		code, out, rec := rollout(t, v2, "--check")
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		now := th.expect(t, before, all(v1))
		for _, h := range th.hosts {
			if now[h.Name].Files != before[h.Name].Files {
				t.Errorf("%s: step dir holds %d files, was %d: check mode wrote there", h.Name, now[h.Name].Files, before[h.Name].Files)
			}
			if rec[h.Name].Changed == 0 {
				t.Errorf("%s: check mode reports no change: the plan misses the cutover", h.Name)
			}
		}
		if !strings.Contains(out, "would cut over from v1") {
			t.Errorf("check mode does not show the planned cutover")
		}
	})

	t.Run("clean rollout in waves [1, 25%, 100%]", func(t *testing.T) {
		code, _, rec := rollout(t, v2)
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		for _, h := range th.hosts {
			if r := rec[h.Name]; r.Failed != 0 || r.Changed == 0 {
				t.Errorf("%s: recap %+v, want changes and no failure", h.Name, r)
			}
		}
		before = th.expect(t, before, all(v2), h1, h2, h3)
	})

	t.Run("the same rollout again is idempotent", func(t *testing.T) {
		code, _, rec := rollout(t, v2)
		if code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		for _, h := range th.hosts {
			if r, ok := rec[h.Name]; !ok || r.Changed != 0 || r.Failed != 0 {
				t.Errorf("%s: recap %+v (present %v), want changed=0 failed=0", h.Name, r, ok)
			}
		}
		before = th.expect(t, before, all(v2))
	})

	t.Run("a build failing on the wave-2 host stops the run; revert brings every host back", func(t *testing.T) {
		undo := th.hosts[1].FailCutoverOn(t, "v3")
		defer undo()
		code, out, rec := rollout(t, v3)
		if code == 0 {
			t.Fatalf("exit 0, want a failed run")
		}
		if r := rec[h2]; r.Failed == 0 {
			t.Errorf("%s: recap %+v, want failed", h2, r)
		}
		if r, ok := rec[h3]; ok && (r.Changed != 0 || r.OK != 0) {
			t.Errorf("%s: recap %+v: wave 3 ran after wave 2 failed", h3, r)
		}
		if !strings.Contains(out, "rolled back") {
			t.Errorf("the failure does not say that the host rolled back")
		}
		// host1 verified v3 in wave 1; host2 rolled itself back, its v3
		// failing in the idle slot while its serving process ran on
		// untouched; host3 never started.
		before = th.expect(t, before, map[string]string{h1: v3, h2: v2, h3: v2}, h1)

		check, _, _ := th.playbook(t, "revert", "--check")
		if check != 0 {
			t.Fatalf("revert --check: exit %d, want 0", check)
		}
		before = th.expect(t, before, map[string]string{h1: v3, h2: v2, h3: v2})

		code, _, rec = th.playbook(t, "revert")
		if code != 0 {
			t.Fatalf("revert: exit %d, want 0", code)
		}
		if rec[h1].Changed == 0 || rec[h2].Changed != 0 || rec[h3].Changed != 0 {
			t.Errorf("revert recap %+v: want a change on %s only", rec, h1)
		}
		before = th.expect(t, before, all(v2), h1)

		// Reverting the same run again changes nothing.
		code, _, rec = th.playbook(t, "revert")
		for _, h := range th.hosts {
			if r := rec[h.Name]; code != 0 || r.Changed != 0 || r.Failed != 0 {
				t.Errorf("second revert, %s: exit %d, recap %+v, want changed=0", h.Name, code, r)
			}
		}
		before = th.expect(t, before, all(v2))
	})
}

// TestAnsibleReusedStepsCheckTheHost runs rolling_update twice under one
// mcp_run_id on one host: a step that exited 0 earlier in the run is
// reused only while the host's facts show it still holds. Another build
// under the same run, and the same build after a revert of the run, are
// cut over again (changed) and end on the build, never "ok" on the old one.
func TestAnsibleReusedStepsCheckTheHost(t *testing.T) {
	th := newTestHosts(t, 1)
	h1 := th.hosts[0].Name
	v1 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v1")
	v2 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v2")
	v3 := nspawntest.BuildBinary(t, "./cmd/mcp-backend", "v3")
	const run = "r11"
	rollout := func(t testing.TB, build string) (int, string, map[string]recap) {
		return th.playbook(t, "rolling_update", "-e", "mcp_build="+build, "-e", "mcp_mcpctl_src="+th.ctl,
			"-e", "mcp_stress_duration=3s", "-e", "mcp_run_id="+run)
	}
	code, _, _ := th.playbook(t, "install", "-e", "mcp_build="+v1, "-e", "mcp_mcpctl_src="+th.ctl)
	if code != 0 {
		t.Fatalf("install: exit %d, want 0", code)
	}
	before := th.states(t)
	before = th.expect(t, before, map[string]string{h1: v1})

	steps := []struct {
		name      string
		play      func(t testing.TB) (int, string, map[string]recap)
		want      string
		changed   bool
		restarted bool
	}{
		{"the run cuts over to v2", func(t testing.TB) (int, string, map[string]recap) { return rollout(t, v2) }, v2, true, true},
		{"the same run with v3 cuts over again", func(t testing.TB) (int, string, map[string]recap) { return rollout(t, v3) }, v3, true, true},
		{"the same run with v3 again changes nothing", func(t testing.TB) (int, string, map[string]recap) { return rollout(t, v3) }, v3, false, false},
		{"revert of the run", func(t testing.TB) (int, string, map[string]recap) {
			return th.playbook(t, "revert", "-e", "mcp_run_id="+run)
		}, v2, true, true},
		{"the same run after its revert cuts over again", func(t testing.TB) (int, string, map[string]recap) { return rollout(t, v3) }, v3, true, true},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			code, out, rec := s.play(t)
			if code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			r := rec[h1]
			if r.Failed != 0 || (r.Changed != 0) != s.changed {
				t.Errorf("recap %+v, want failed=0 and changed>0 = %v", r, s.changed)
			}
			if s.changed && strings.Contains(out, "by an earlier invocation of this run") {
				t.Errorf("the cutover was reported from an earlier record")
			}
			var restarted []string
			if s.restarted {
				restarted = append(restarted, h1)
			}
			before = th.expect(t, before, map[string]string{h1: s.want}, restarted...)
		})
		if !ok {
			t.FailNow()
		}
	}
}
