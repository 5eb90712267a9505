package sandbox

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"os/user"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Spec is a profile resolved on this host, plus the masks: what the
// helper is handed on its command line.
type Spec struct {
	Profile string `json:"profile"`
	// Dynamic: each command gets its own uid (ForCommand).
	Dynamic  bool     `json:"dynamic,omitempty"`
	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	Groups   []int    `json:"groups"`
	Home     string   `json:"home"`
	Caps     []int    `json:"caps"` // kept capabilities (numbers)
	ReadOnly bool     `json:"readOnly"`
	Writable []string `json:"writable"`
	Network  bool     `json:"network"`
	Seccomp  bool     `json:"seccomp"`
	// Mask are paths and path patterns (files.deny's language) covered in
	// the command's mount namespace: a directory by an empty read-only
	// tmpfs, a file by /dev/null bound read-only.
	Mask []string `json:"mask"`
	// HidePIDs are processes whose /proc entries (and their threads')
	// are covered too: the backend's. The helper adds its parent's.
	HidePIDs []int `json:"hidePids,omitempty"`
	// Dir is the working directory the call asked for. Empty: the
	// backend's, or / where the profile's mounts hide it (a private /tmp).
	Dir string `json:"dir,omitempty"`
}

// Resolve turns a profile into a Spec on this host: its user and groups
// looked up, its capabilities numbered. An error names what this host
// lacks; the caller refuses to start (no profile runs with less).
func Resolve(name string, p Profile, mask []string) (*Spec, error) {
	s := &Spec{Profile: name, ReadOnly: p.ReadOnly, Writable: slices.Clone(p.Writable), Network: p.Network, Seccomp: p.Seccomp, Home: "/"}
	u := p.User
	if u == "" {
		u = "root"
	}
	if u == DynamicUser {
		s.Dynamic, s.UID, s.GID = true, DynamicBase, DynamicBase
		if err := s.resolveGroups(name, p); err != nil {
			return nil, err
		}
		return s, s.resolveCaps(p, mask)
	}
	usr, err := lookupUser(u)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w", u, err)
	}
	s.UID, _ = strconv.Atoi(usr.Uid)
	s.GID, _ = strconv.Atoi(usr.Gid)
	if usr.HomeDir != "" {
		s.Home = usr.HomeDir
	}
	if s.UID != 0 && u == "nobody" {
		// nobody's primary group: Debian's nogroup or Fedora's nobody.
		for _, g := range []string{"nogroup", "nobody"} {
			if gr, err := user.LookupGroup(g); err == nil {
				s.GID, _ = strconv.Atoi(gr.Gid)
				break
			}
		}
	}
	if err := s.resolveGroups(name, p); err != nil {
		return nil, err
	}
	return s, s.resolveCaps(p, mask)
}

// resolveGroups looks the profile's supplementary groups up.
func (s *Spec) resolveGroups(name string, p Profile) error {
	for _, g := range p.Groups {
		gr, err := lookupGroup(g)
		if err != nil {
			if name == Inspect && slices.Contains(optionalGroups, g) {
				continue
			}
			return fmt.Errorf("group %q: %w", g, err)
		}
		gid, _ := strconv.Atoi(gr.Gid)
		s.Groups = append(s.Groups, gid)
	}
	return nil
}

// resolveCaps numbers the kept capabilities and takes the masks.
func (s *Spec) resolveCaps(p Profile, mask []string) error {
	for _, c := range p.Capabilities {
		if c == AllCapabilities {
			for n := 0; n <= lastCap; n++ {
				if n != capSysPtrace {
					s.Caps = append(s.Caps, n)
				}
			}
			continue
		}
		n, ok := capNumber(c)
		if !ok {
			return fmt.Errorf("capability %q: unknown", c)
		}
		s.Caps = append(s.Caps, n)
	}
	slices.Sort(s.Caps)
	s.Caps = slices.Compact(s.Caps)
	s.Mask = slices.Clone(mask)
	return nil
}

var dynamicNext atomic.Uint32

// ForCommand is the Spec one command runs under: with Dynamic, a copy
// holding the next uid of the range (round robin: a uid comes back after
// DynamicCount commands), else s itself.
func (s *Spec) ForCommand() *Spec {
	if s == nil || !s.Dynamic {
		return s
	}
	c := *s
	c.UID = DynamicBase + int(dynamicNext.Add(1)%DynamicCount)
	c.GID = c.UID
	return &c
}

func lookupUser(u string) (*user.User, error) {
	if _, err := strconv.Atoi(u); err == nil {
		return user.LookupId(u)
	}
	return user.Lookup(u)
}

func lookupGroup(g string) (*user.Group, error) {
	if _, err := strconv.Atoi(g); err == nil {
		return user.LookupGroupId(g)
	}
	return user.LookupGroup(g)
}

// HelperCommand is the hidden subcommand of mcp-backend that Enter runs.
const HelperCommand = "sandbox-exec"

// Command returns argv run under s through the helper exe (mcp-backend
// itself): `exe sandbox-exec --spec JSON -- argv...`, started in a mount
// namespace of its own (and a network namespace of its own when s has
// no network). The caller sets Env (see Env), Dir and the streams, and
// starts it through procgroup.
func Command(exe string, s *Spec, argv []string) (*exec.Cmd, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	args := append([]string{HelperCommand, "--spec", string(b), "--"}, argv...)
	cmd := exec.Command(exe, args...)
	flags := uintptr(syscall.CLONE_NEWNS)
	if !s.Network {
		flags |= syscall.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: flags}
	return cmd, nil
}

// BasePath is PATH in a sandboxed command's environment.
const BasePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is the environment a sandboxed command starts from: none of the
// backend's, a fixed base that neutralises pagers and editors (no TTY, no
// LESSOPEN), then the call's own variables (which may override the base).
func Env(s *Spec, extra map[string]string) []string {
	env := []string{
		"PATH=" + BasePath,
		"LANG=C.UTF-8",
		"HOME=" + s.Home,
		"TERM=dumb",
		"PAGER=cat",
		"SYSTEMD_PAGER=cat",
		"GIT_PAGER=cat",
		"LESSSECURE=1",
		"SYSTEMD_EDITOR=/bin/false",
		"EDITOR=/bin/false",
		"VISUAL=/bin/false",
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		env = append(env, k+"="+extra[k])
	}
	return env
}

// maskTargets expands the mask patterns to the paths the helper covers:
// a literal path as is; a pattern with "**" covers its literal leading
// directory whole; other globs are expanded now.
func maskTargets(patterns []string, glob func(string) ([]string, error)) []string {
	var out []string
	for _, p := range patterns {
		comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
		lit := 0
		for lit < len(comps) && !strings.ContainsAny(comps[lit], `*?[\`) {
			lit++
		}
		if lit == len(comps) {
			out = append(out, p)
			continue
		}
		if slices.Contains(comps[lit:], "**") {
			out = append(out, "/"+path.Join(comps[:lit]...))
			continue
		}
		m, _ := glob(p)
		out = append(out, m...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckMask says why a mask pattern cannot be enforced ("" when it can):
// one whose literal part is / would cover everything.
func CheckMask(p string) string {
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(comps) > 0 && strings.ContainsAny(comps[0], `*?[\`) {
		return "the sandbox cannot cover a pattern that starts with a wildcard (it would cover /): name its directory, e.g. /srv/secrets/**"
	}
	return ""
}
