package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string // "" valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"built-in defaults", func(c *Config) { c.Allow, c.Approved = Inspect, Root }, ""},
		{"unknown default", func(c *Config) { c.Approved = "jail" }, `sandbox.approved = "jail": must be none or a profile: inspect, root`},
		{"custom default", func(c *Config) { c.Allow = "web"; c.Profiles["web"] = Profile{User: "www-data"} }, ""},
		{"shadows a built-in", func(c *Config) { c.Profiles[Inspect] = Profile{} }, `sandbox.profiles.inspect = "inspect": is built in`},
		{"bad name", func(c *Config) { c.Profiles["a b"] = Profile{} }, `sandbox.profiles.a b = "a b": a profile name must be`},
		{"bad user", func(c *Config) { c.Profiles["w"] = Profile{User: "a:b"} }, `sandbox.profiles.w.user = "a:b"`},
		{"bad capability", func(c *Config) { c.Profiles["w"] = Profile{Capabilities: []string{"CAP_FLY"}} }, `sandbox.profiles.w.capabilities[0] = "CAP_FLY"`},
		{"capability without prefix", func(c *Config) { c.Profiles["w"] = Profile{Capabilities: []string{"net_admin"}} }, ""},
		{"relative writable", func(c *Config) { c.Profiles["w"] = Profile{ReadOnly: true, Writable: []string{"srv"}} }, `sandbox.profiles.w.writable[0] = "srv"`},
		{"writable /", func(c *Config) { c.Profiles["w"] = Profile{ReadOnly: true, Writable: []string{"/"}} }, `sandbox.profiles.w.writable[0] = "/"`},
		{"writable without readOnly", func(c *Config) { c.Profiles["w"] = Profile{Writable: []string{"/srv"}} }, `only means something with readOnly`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.cfg(&c)
			errs := c.Validate()
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Fatalf("errors %v, want none", errs)
			case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Fatalf("errors %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestFor(t *testing.T) {
	c := Config{Allow: Inspect, Approved: Root}
	for _, tc := range []struct {
		rule     string
		approved bool
		want     string
	}{
		{"", false, Inspect},
		{"", true, Root},
		{"web", false, "web"},
		{"web", true, "web"},
	} {
		if got := c.For(tc.rule, tc.approved); got != tc.want {
			t.Errorf("For(%q, %v) = %q, want %q", tc.rule, tc.approved, got, tc.want)
		}
	}
}

func TestMaskTargets(t *testing.T) {
	glob := func(p string) ([]string, error) {
		return map[string][]string{"/home/*/.ssh": {"/home/a/.ssh", "/home/b/.ssh"}}[p], nil
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		want     []string
	}{
		{"literal", []string{"/etc/shadow"}, []string{"/etc/shadow"}},
		{"glob expanded", []string{"/home/*/.ssh"}, []string{"/home/a/.ssh", "/home/b/.ssh"}},
		{"** covers its literal directory", []string{"/srv/secrets/**/key"}, []string{"/srv/secrets"}},
		{"glob matching nothing", []string{"/nowhere/*"}, nil},
		{"each once", []string{"/a", "/a", "/b/**"}, []string{"/a", "/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maskTargets(tc.patterns, glob); !slices.Equal(got, tc.want) {
				t.Fatalf("maskTargets(%q) = %q, want %q", tc.patterns, got, tc.want)
			}
		})
	}
	for p, ok := range map[string]bool{"/etc/shadow": true, "/home/*/.ssh": true, "/**/id_rsa": false, "/*": false} {
		if got := CheckMask(p) == ""; got != ok {
			t.Errorf("CheckMask(%q) = %q, want ok=%v", p, CheckMask(p), ok)
		}
	}
}

func TestEnv(t *testing.T) {
	s := &Spec{Home: "/nonexistent"}
	env := Env(s, map[string]string{"PAGER": "less", "FOO": "1"})
	for _, want := range []string{"PATH=" + BasePath, "HOME=/nonexistent", "TERM=dumb", "PAGER=less", "FOO=1", "LESSSECURE=1", "SYSTEMD_EDITOR=/bin/false"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %q: %q", want, env)
		}
	}
	if slices.Contains(env, "PAGER=cat") {
		t.Errorf("the call's PAGER did not replace the base: %q", env)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "MCP_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			t.Errorf("a backend variable in the clean environment: %q", kv)
		}
	}
}

func TestResolve(t *testing.T) {
	s, err := Resolve(Inspect, Builtin()[Inspect], []string{"/etc/x"})
	if err != nil {
		t.Fatal(err)
	}
	if s.UID == 0 || s.GID == 0 || len(s.Caps) != 0 || !s.ReadOnly || !s.Seccomp || !slices.Equal(s.Mask, []string{"/etc/x"}) {
		t.Fatalf("inspect resolved to %+v", s)
	}
	r, err := Resolve(Root, Builtin()[Root], nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.UID != 0 || slices.Contains(r.Caps, capSysPtrace) || len(r.Caps) != lastCap {
		t.Fatalf("root resolved to uid %d caps %v: want every capability but CAP_SYS_PTRACE", r.UID, r.Caps)
	}
	if _, err := Resolve("web", Profile{User: "no-such-user-sbx"}, nil); err == nil {
		t.Fatal("a profile of a missing user resolved")
	}
	if _, err := Resolve("web", Profile{Groups: []string{"no-such-group-sbx"}}, nil); err == nil {
		t.Fatal("a custom profile of a missing group resolved")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/t\04`: `/t\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFilterPolicy(t *testing.T) {
	for _, host := range []bool{false, true} {
		p, err := filterPolicy(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Assemble(); err != nil {
			t.Fatalf("host=%v: %v", host, err)
		}
		denied := p.Syscalls[0].Names
		for _, n := range []string{"mount", "umount2", "unshare", "setns", "ptrace", "open_by_handle_at"} {
			if !slices.Contains(denied, n) {
				t.Errorf("host=%v: %s not denied", host, n)
			}
		}
		if got := slices.Contains(denied, "settimeofday"); got != host {
			t.Errorf("host=%v: settimeofday denied = %v", host, got)
		}
	}
}

func TestForCommand(t *testing.T) {
	s, err := Resolve("isolated", Profile{User: DynamicUser, ReadOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.ForCommand(), s.ForCommand()
	for _, c := range []*Spec{a, b} {
		if c.UID < DynamicBase || c.UID >= DynamicBase+DynamicCount || c.GID != c.UID {
			t.Fatalf("a dynamic uid %d gid %d, want one gid=uid in [%d, %d)", c.UID, c.GID, DynamicBase, DynamicBase+DynamicCount)
		}
	}
	if a.UID == b.UID || s.UID != DynamicBase {
		t.Fatalf("two commands got uid %d and %d (the profile's stays %d)", a.UID, b.UID, s.UID)
	}
	r, _ := Resolve(Root, Builtin()[Root], nil)
	if r.ForCommand() != r {
		t.Fatal("a profile with a named user got a copy")
	}
}
