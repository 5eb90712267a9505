package policy

import (
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// unitTypes are the suffixes of systemd's unit types.
var unitTypes = []string{
	".service", ".socket", ".target", ".timer", ".mount", ".automount",
	".swap", ".path", ".slice", ".scope", ".device",
}

// UnitDirs are where systemd reads system unit files, in its order of
// precedence: the first file of a name is the one it loads.
var UnitDirs = []string{
	"/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
	"/run/systemd/generator.early", "/etc/systemd/system", "/etc/systemd/system.attached",
	"/run/systemd/system", "/run/systemd/system.attached", "/run/systemd/generator",
	"/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/run/systemd/generator.late",
	"/lib/systemd/system",
}

// UnitResolver asks systemd what a unit name resolves to: its Id and
// every name it is known by (systemctl show -p Id,Names). The server and
// check-policy pass the systemd client's UnitNames.
type UnitResolver func(ctx context.Context, unit string) (id string, names []string, err error)

// unitType returns name's unit type suffix, or "".
func unitType(name string) string {
	for _, t := range unitTypes {
		if strings.HasSuffix(name, t) && len(name) > len(t) {
			return t
		}
	}
	return ""
}

// mangleUnit is the unit systemctl acts on for name: a name without a unit
// type is a service ("ssh" is ssh.service).
func mangleUnit(name string) string {
	if name == "" || unitType(name) != "" {
		return name
	}
	return name + ".service"
}

// templateOf is the template of an instance ("getty@.service" for
// "getty@tty1.service"), or "" when name is no instance.
func templateOf(name string) string {
	t := unitType(name)
	at := strings.IndexByte(name, '@')
	if t == "" || at <= 0 || at+1 >= len(name)-len(t) {
		return ""
	}
	return name[:at+1] + t
}

// UnitOf is the unit a call of a unit tool names, decoded as targetsOf
// decodes it; false for any other call.
func UnitOf(tool string, raw json.RawMessage) (string, bool) {
	if !slices.Contains(unitTools, tool) {
		return "", false
	}
	var in struct {
		Unit string `json:"unit"`
	}
	if json.Unmarshal(raw, &in) != nil || in.Unit == "" {
		return "", false
	}
	return in.Unit, true
}

// ResolveUnits sets c.Units for a call of a unit tool when a rule matches
// units: what the unit files' symlinks make of the name, then what systemd
// itself resolves it to through resolve (nil: the files only), which
// decides the unit's own name. An error of resolve is returned; c.Units
// then holds what the files gave.
func (p *Policy) ResolveUnits(ctx context.Context, c *Call, resolve UnitResolver) error {
	if p == nil || !p.unitRules {
		return nil
	}
	unit, ok := UnitOf(c.Tool, c.Args)
	if !ok {
		return nil
	}
	var err error
	c.Units, err = resolveUnit(ctx, mangleUnit(unit), UnitDirs, resolve)
	return err
}

// resolveUnit is the unit's own name first, then every other name it is
// known by, from the unit files in dirs and from resolve.
func resolveUnit(ctx context.Context, name string, dirs []string, resolve UnitResolver) ([]string, error) {
	id, names := fileAliases(name, dirs)
	var err error
	if resolve != nil {
		var sdID string
		var sdNames []string
		if sdID, sdNames, err = resolve(ctx, name); err == nil {
			id = sdID
			names = append(names, sdNames...)
		}
	}
	out := []string{id}
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, err
}

// fileAliases follows the alias symlinks of the unit files from name (an
// instance through its template's): the name it ends at, which systemd
// loads, and every name on the way.
func fileAliases(name string, dirs []string) (string, []string) {
	seen := []string{name}
	cur := name
	for range 16 { // a loop of symlinks must not loop here
		next := aliasOf(cur, dirs)
		if next == "" {
			if t := templateOf(cur); t != "" {
				if tt := aliasOf(t, dirs); tt != "" && templateOf(tt) == "" && strings.HasSuffix(tt, "@"+unitType(tt)) {
					inst := cur[strings.IndexByte(cur, '@')+1 : len(cur)-len(unitType(cur))]
					next = strings.TrimSuffix(tt, unitType(tt)) + inst + unitType(tt)
				}
			}
		}
		if next == "" || slices.Contains(seen, next) {
			break
		}
		seen = append(seen, next)
		cur = next
	}
	return cur, seen
}

// aliasOf is the unit name the first unit file of name links to when it
// is an alias (a symlink to another name of the same type), else "".
func aliasOf(name string, dirs []string) string {
	if strings.ContainsRune(name, '/') {
		return ""
	}
	for _, d := range dirs {
		f := filepath.Join(d, name)
		fi, err := os.Lstat(f)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return "" // the unit's own file
		}
		target, err := os.Readlink(f)
		if err != nil || target == "/dev/null" {
			return "" // masked: no alias
		}
		base := path.Base(target)
		if base == name || unitType(base) != unitType(name) {
			return "" // a linked unit file, not an alias
		}
		return base
	}
	return ""
}

// unitNames are the names a rule's unit globs are matched against: for a
// deny or ask rule (loose) every name the unit is known by, for an allow
// rule its own name; each with its template when it is an instance.
func (t target) unitNames(loose bool) []string {
	names := t.units
	if !loose {
		names = names[:1]
	}
	out := slices.Clone(names)
	for _, n := range names {
		if tm := templateOf(n); tm != "" && !slices.Contains(out, tm) {
			out = append(out, tm)
		}
	}
	return out
}
