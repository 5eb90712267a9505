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
