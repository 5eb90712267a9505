// Package sandbox holds the kernel boundary under every shell command a
// call starts: named profiles (the built-ins inspect and root, and custom
// ones from the same parts: user, groups, capabilities kept, a read-only
// file system with writable paths, network, a system call filter), the
// masks every profile carries (the backend's secrets and each path a
// policy deny rule names, covered in the command's own mount namespace),
// the clean environment commands start from, and Enter, the re-exec
// helper (`mcp-backend sandbox-exec`) that sets a profile up in the child
// and execs the shell. The backend's config names the profiles
// ("sandbox"); a policy rule's "sandbox" chooses one.
package sandbox

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Names of the built-in profiles, and of no sandbox at all.
const (
	Inspect = "inspect" // read the host, change nothing: an unprivileged user, read-only, no capabilities
	Root    = "root"    // today's root shell, with the masks and no mount or namespace calls
	None    = "none"    // no sandbox (only as an explicit default: the backend's environment, no masks)
)

// Config is the "sandbox" section of the backend's config.
type Config struct {
	// Allow is the profile of an allowed shell command whose rule names
	// none (and of every command when no policy is configured).
	Allow string `json:"allow"`
	// Approved is the profile of a command that ran after an approval
	// (an ask accepted by the user or the operator) whose rule names none.
	Approved string `json:"approved"`
	// Profiles are custom profiles by name (not inspect, root or none).
	Profiles map[string]Profile `json:"profiles"`
}

// Profile is what a command may do. The zero Profile runs as root, with
// every capability dropped, no network and a writable file system.
type Profile struct {
	// User runs the command: a name or a numeric uid; "" or "root": root;
	// "dynamic": a uid (and gid) of its own for each command, from
	// DynamicBase on, that no account and no other command holds (with
	// no account, the system bus refuses it: no systemctl).
	User string `json:"user"`
	// Groups are supplementary groups (names or gids) besides the user's
	// primary one.
	Groups []string `json:"groups"`
	// Capabilities are kept (e.g. CAP_NET_BIND_SERVICE); every other one
	// leaves the bounding set. "ALL" keeps all but CAP_SYS_PTRACE.
	Capabilities []string `json:"capabilities"`
	// ReadOnly remounts every file system read-only, except Writable and
	// a private /tmp.
	ReadOnly bool `json:"readOnly"`
	// Writable are absolute paths left writable under ReadOnly.
	Writable []string `json:"writable"`
	// Network off puts the command in an empty network namespace.
	Network bool `json:"network"`
	// Seccomp denies the host-changing system calls: clock, module,
	// reboot, swap, raw I/O (mount and namespace calls are denied in
	// every profile: they would undo the masks).
	Seccomp bool `json:"seccomp"`
	// NoNewPrivileges is always on (PR_SET_NO_NEW_PRIVS): setuid
	// binaries and file capabilities gain nothing.
}

// DynamicUser in Profile.User gives each command a uid of its own.
const DynamicUser = "dynamic"

// DynamicBase and DynamicCount bound the dynamic uids: a range no
// distribution allocates (above the container ranges, below 2^31), so
// such a uid owns no file and no other process but the command's. The
// gid is the uid.
const (
	DynamicBase  = 0x7FFE0000
	DynamicCount = 1 << 16
)

// AllCapabilities in Profile.Capabilities keeps every capability but
// CAP_SYS_PTRACE (which would open the backend's memory, see Enter).
const AllCapabilities = "ALL"

// Builtin returns the built-in profiles.
func Builtin() map[string]Profile {
	return map[string]Profile{
		Inspect: {
			User:     "nobody",
			Groups:   []string{"systemd-journal", "adm"},
			ReadOnly: true,
			Network:  true,
			Seccomp:  true,
		},
		Root: {
			User:         "root",
			Capabilities: []string{AllCapabilities},
			Network:      true,
		},
	}
}

// optionalGroups of the built-in inspect are skipped where the host has
// no such group; a custom profile's groups must exist.
var optionalGroups = []string{"systemd-journal", "adm"}

// Default is a config without "sandbox": every command under root, so the
// masks and the clean environment hold out of the box (same privileges as
// a plain root shell otherwise). "none" is only ever an explicit choice.
func Default() Config {
	return Config{Allow: Root, Approved: Root, Profiles: map[string]Profile{}}
}

// Profile returns the named profile (built-in or custom).
func (c Config) Profile(name string) (Profile, bool) {
	if p, ok := Builtin()[name]; ok {
		return p, true
	}
	p, ok := c.Profiles[name]
	return p, ok
}

// Names lists the profiles a rule may name, sorted.
func (c Config) Names() []string {
	out := []string{Inspect, Root}
	for n := range c.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Enabled says whether any command can run in a sandbox: a default or a
// rule names a profile.
func (c Config) Enabled(ruleProfiles []string) bool {
	return c.Allow != None || c.Approved != None || slices.ContainsFunc(ruleProfiles, func(s string) bool { return s != "" })
}

// For is the profile a command runs in: the one its deciding rule names,
// else the default for how it got to run (allowed, or approved after an
// ask).
func (c Config) For(ruleSandbox string, approved bool) string {
	switch {
	case ruleSandbox != "":
		return ruleSandbox
	case approved:
		return c.Approved
	}
	return c.Allow
}

// Validate returns one error per bad value, each naming its key.
func (c Config) Validate() []error {
	var errs []error
	bad := func(key string, val any, want string) {
		errs = append(errs, fmt.Errorf("sandbox.%s = %v: %s", key, val, want))
	}
	for key, v := range map[string]string{"allow": c.Allow, "approved": c.Approved} {
		if _, ok := c.Profile(v); !ok && v != None {
			bad(key, fmt.Sprintf("%q", v), "must be none or a profile: "+strings.Join(c.Names(), ", "))
		}
	}
	names := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k := fmt.Sprintf("profiles.%s", n)
		if !validName(n) {
			bad(k, fmt.Sprintf("%q", n), "a profile name must be 1..64 letters, digits, '.', '_' or '-'")
		}
		if n == Inspect || n == Root || n == None {
			bad(k, fmt.Sprintf("%q", n), "is built in: name a custom profile otherwise")
		}
		p := c.Profiles[n]
		if p.User != "" && !validName(p.User) {
			bad(k+".user", fmt.Sprintf("%q", p.User), "must be a user name or uid")
		}
		for i, g := range p.Groups {
			if !validName(g) {
				bad(fmt.Sprintf("%s.groups[%d]", k, i), fmt.Sprintf("%q", g), "must be a group name or gid")
			}
		}
		for i, cp := range p.Capabilities {
			if _, ok := capNumber(cp); !ok && cp != AllCapabilities {
				bad(fmt.Sprintf("%s.capabilities[%d]", k, i), fmt.Sprintf("%q", cp), "must be ALL or a capability name such as CAP_NET_BIND_SERVICE")
			}
		}
		for i, w := range p.Writable {
			if !path.IsAbs(w) || path.Clean(w) != w || w == "/" {
				bad(fmt.Sprintf("%s.writable[%d]", k, i), fmt.Sprintf("%q", w), "must be a clean absolute path other than /")
			}
		}
		if len(p.Writable) > 0 && !p.ReadOnly {
			bad(k+".writable", p.Writable, "only means something with readOnly: true")
		}
	}
	return errs
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

type ctxKey struct{}

// Choice is the sandbox a call's command runs in: the profile's name and
// what the helper needs (nil Spec: no sandbox).
type Choice struct {
	Name string
	Spec *Spec
}

// With returns ctx carrying the call's sandbox.
func With(ctx context.Context, c Choice) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the call's sandbox; ok is false when none was chosen.
func From(ctx context.Context) (Choice, bool) {
	c, ok := ctx.Value(ctxKey{}).(Choice)
	return c, ok
}
