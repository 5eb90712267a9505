package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/overdeck/mcp-backend/backend/sandbox"
)

// validateSandbox checks the sandbox section and what the policy says of
// it: each profile a rule names exists, and, once any command runs in a
// sandbox, each deny rule's path can be masked.
func (c Config) validateSandbox() []error {
	errs := c.Sandbox.Validate()
	used := c.Policy.Sandboxes()
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := c.Sandbox.Profile(n); !ok && n != sandbox.None {
			errs = append(errs, fmt.Errorf("%s = %q: no such profile (built-in inspect and root, or one of sandbox.profiles: %s)", used[n], n, strings.Join(c.Sandbox.Names(), ", ")))
		}
	}
	if !c.Sandbox.Enabled(names) {
		return errs
	}
	paths, keys := c.Policy.DenyPaths()
	for i, p := range paths {
		if why := sandbox.CheckMask(p); why != "" {
			errs = append(errs, fmt.Errorf("%s = %q: %s", keys[i], p, why))
		}
	}
	return errs
}

// SandboxWarnings names each default that chooses no sandbox at all
// ("none", an explicit opt-out since the default is root; a rule cannot) and what that gives up;
// check-config prints them and serve logs them.
func (c Config) SandboxWarnings() []string {
	var keys []string
	for _, kv := range [][2]string{{"sandbox.allow", c.Sandbox.Allow}, {"sandbox.approved", c.Sandbox.Approved}} {
		if kv[1] == sandbox.None {
			keys = append(keys, kv[0])
		}
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s = %q: commands it chooses run without a sandbox: the backend's secrets, the paths of deny rules and its environment are within their reach", k, sandbox.None))
	}
	return out
}
