// Package filepolicy decides which files the file tools (file.read,
// file.write, file.list) may touch. Two kinds of rule apply to every
// principal: the backend's own secrets (its token file, its config, its
// state directories, process memory), which no configuration opens, and
// the operator's path policy (config "files": roots a call may use and
// paths refused, host credentials by default).
//
// A decision is made on what was opened, never on the path a client sent:
// the caller passes the canonical path of its open handle (what
// /proc/self/fd/N names) and the handle's device and inode. So a symlink,
// `..`, /proc/self/fd/N, /proc/PID/root/... or a hard link to a secret
// leads to the same refusal as the secret's own path.
package filepolicy

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Secret is one of the backend's own files or directories, named by the
// rule that refuses it (e.g. "auth.bearerTokenFile").
type Secret struct {
	Path string
	Rule string
}

// Options are the rules of a Policy.
type Options struct {
	// SecretFiles are refused by device+inode (hard links included) and
	// by canonical path (a file not yet created).
	SecretFiles []Secret
	// SecretDirs are refused with everything below them; a hard link to a
	// file inside one is refused too.
	SecretDirs []Secret
	// SecretPatterns are refused like Deny patterns, but are not the
	// operator's to change (process memory).
	SecretPatterns []Secret
	// Roots are the trees a call may use (config files.roots); empty: "/".
	Roots []string
	// Deny are the patterns refused (config files.deny), as ValidPattern
	// accepts them.
	Deny []string
}

// Policy is a set of rules; nil allows everything.
type Policy struct {
	o       Options
	now     func() time.Time
	deny    *Patterns // o.Deny
	secrets linkIndex // the files below o.SecretDirs, by secret
}

// devIno identifies a file.
type devIno struct{ dev, ino uint64 }

// New returns the policy of o. Paths are used as given (absolute, clean);
// secrets that do not exist yet are matched by path when they appear.
func New(o Options) *Policy {
	if len(o.Roots) == 0 {
		o.Roots = []string{"/"}
	}
	p := &Policy{o: o, now: time.Now, deny: NewPatterns(o.Deny)}
	now := func() time.Time { return p.now() }
	p.deny.links.now = now
	p.secrets = linkIndex{now: now, sources: func() [][]string {
		var out [][]string
		for _, s := range o.SecretDirs {
			out = append(out, []string{resolved(s.Path)})
		}
		return out
	}}
	return p
}

// Patterns are path patterns (ValidPattern's language: files.deny, the
// policy's paths rules) and what they cover: a path one matches, or is
// below what one matches, and a file with several names another of which
// they cover (a hard link). One implementation for every such rule.
type Patterns struct {
	pats  []string
	links linkIndex
}

// NewPatterns returns the patterns pats, valid as ValidPattern says.
func NewPatterns(pats []string) *Patterns {
	ps := &Patterns{pats: slices.Clone(pats)}
	ps.links = linkIndex{now: time.Now, sources: func() [][]string {
		var out [][]string
		for _, p := range ps.pats {
			out = append(out, expand(p))
		}
		return out
	}}
	return ps
}

// Covers returns the index of the first pattern that covers the file at
// canonical, whose inode is st (nil: by path only), or -1: one that
// matches the path, or, for a regular file with more than one name,
// another of its names.
func (ps *Patterns) Covers(canonical string, st *Inode) int {
	if ps == nil {
		return -1
	}
	linked := func(int) bool { return false }
	if st != nil && st.Regular && st.Nlink > 1 {
		linked = ps.links.lookup(st)
	}
	for i, pat := range ps.pats {
		if Match(pat, canonical) || linked(i) {
			return i
		}
	}
	return -1
}

// Inode is what Check needs of an opened file's stat.
type Inode struct {
	Dev, Ino uint64
	Nlink    uint64
	Regular  bool
}

// InodeOf takes an Inode from a stat.
func InodeOf(st *unix.Stat_t) *Inode {
	if st == nil {
		return nil
	}
	return &Inode{Dev: st.Dev, Ino: st.Ino, Nlink: uint64(st.Nlink), Regular: st.Mode&unix.S_IFMT == unix.S_IFREG}
}

// Refusal says which rule refused a path. Its message names the path and
// the rule, never anything read from a secret.
type Refusal struct {
	Path string
	Rule string
	Why  string
}

func (r *Refusal) Error() string { return r.Path + " " + r.Why + " (" + r.Rule + ")" }

// Check decides on an opened object: nil when the file tools may use it,
// else a *Refusal naming the rule. p may be nil (no policy).
func (p *Policy) Check(canonical string, st *Inode) error {
	if p == nil {
		return nil
	}
	if !filepath.IsAbs(canonical) {
		// An anonymous object (pipe:, socket:) or something unnamed:
		// nothing the policy can place, so nothing a file tool may use.
		return &Refusal{Path: canonical, Rule: "files", Why: "has no path the file policy can check"}
	}
	canonical = filepath.Clean(canonical)
	for _, s := range p.o.SecretFiles {
		if canonical == s.Path || canonical == resolved(s.Path) {
			return secretRefusal(canonical, s)
		}
		if st != nil {
			var ss unix.Stat_t
			if unix.Stat(s.Path, &ss) == nil && ss.Dev == st.Dev && ss.Ino == st.Ino {
				return secretRefusal(canonical, s)
			}
		}
	}
	for _, s := range p.o.SecretDirs {
		for _, d := range []string{s.Path, resolved(s.Path)} {
			if within(canonical, d) {
				return secretRefusal(canonical, s)
			}
		}
	}
	if st != nil && st.Regular && st.Nlink > 1 {
		linked := p.secrets.lookup(st)
		for i, s := range p.o.SecretDirs {
			if linked(i) {
				return secretRefusal(canonical, s)
			}
		}
	}
	for _, s := range p.o.SecretPatterns {
		if Match(s.Path, canonical) {
			return secretRefusal(canonical, s)
		}
	}
	inRoot := false
	for _, r := range p.o.Roots {
		if within(canonical, r) {
			inRoot = true
			break
		}
	}
	if !inRoot {
		return &Refusal{Path: canonical, Rule: "files.roots", Why: "is outside every root the file policy allows"}
	}
	if i := p.deny.Covers(canonical, st); i >= 0 {
		return &Refusal{Path: canonical, Rule: fmt.Sprintf("files.deny[%d] %q", i, p.o.Deny[i]), Why: "is refused by the file policy"}
	}
	return nil
}

func secretRefusal(p string, s Secret) *Refusal {
	return &Refusal{Path: p, Rule: s.Rule, Why: "is one of the backend's own secrets; no file tool may touch it"}
}

// resolved is p with its symlinks resolved, or p when that fails (the
// path does not exist yet).
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// A file with more than one name is refused when another of its names is
// covered by a rule: a hard link to a denied file, or to a file in a secret
// directory. Finding the other names means searching what the rules
// cover; the index of those files is built at the first such check and
// then at most every linkIndexTTL, so only a file created since, and
// linked, can be missed, for at most that long.
// Making a hard link to a root-owned file takes root (or its owner, with
// fs.protected_hardlinks), so an index that is a few seconds old misses
// nothing a caller of these tools could have made.
const (
	linkIndexTTL = 10 * time.Second
	// maxLinkScan bounds the entries one rule's search visits; a rule
	// whose tree is larger gets all hard-linked files refused, since it
	// cannot rule them out.
	maxLinkScan = 20000
	// maxStarStar is how many components "**" stands for in the search
	// (its match by path has no bound): enough for /root/.ssh and
	// /home/USER/.ssh, bounded so the search stays cheap.
	maxStarStar = 2
)

// linkIndex finds which of its sources (each a list of globs: what one
// rule covers) covers another name of a file.
type linkIndex struct {
	now     func() time.Time
	sources func() [][]string // read at each rebuild

	mu      sync.Mutex
	links   map[devIno]int // files a source covers -> the first such source
	over    map[int]bool   // sources whose trees were too large to index: their hard links are refused
	indexed time.Time      // when links was built
}

// lookup returns whether source i covers another name of the file st.
func (x *linkIndex) lookup(st *Inode) func(i int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.links == nil || x.now().Sub(x.indexed) >= linkIndexTTL {
		x.links, x.over = map[devIno]int{}, map[int]bool{}
		for i, globs := range x.sources() {
			x.index(i, globs)
		}
		x.indexed = x.now()
	}
	// A rebuild makes new maps; these stay as they are.
	hit, ok := x.links[devIno{st.Dev, st.Ino}]
	over := x.over
	return func(i int) bool { return ok && hit == i || over[i] }
}

// expand turns a pattern into the globs that find what it covers.
func expand(pattern string) []string {
	comps := components(pattern)
	i := slices.Index(comps, "**")
	if i < 0 {
		return []string{pattern}
	}
	var globs []string
	for k := 0; k <= maxStarStar; k++ {
		e := slices.Concat(comps[:i], slices.Repeat([]string{"*"}, k), comps[i+1:])
		if !slices.Contains(e, "**") { // several "**": matched by path only
			globs = append(globs, "/"+strings.Join(e, "/"))
		}
	}
	return globs
}

// index adds the files that the globs match, or that are below a
// directory they match, to the index under source.
func (x *linkIndex) index(source int, globs []string) {
	n := 0
	add := func(path string, d fs.DirEntry) error {
		if n++; n > maxLinkScan {
			x.over[source] = true
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		// Every file, not only those with several names now: a link made
		// later to a file already here is found without a rebuild.
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if _, seen := x.links[devIno{st.Dev, st.Ino}]; !seen {
				x.links[devIno{st.Dev, st.Ino}] = source
			}
		}
		return nil
	}
	for _, g := range globs {
		// Pseudo-filesystems have no hard links, and globbing them is slow.
		if within(g, "/proc") || within(g, "/sys") || within(g, "/dev") {
			continue
		}
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			_ = filepath.WalkDir(m, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil // unreadable parts: their files cannot be linked by us either
				}
				return add(path, d)
			})
			if x.over[source] {
				return
			}
		}
	}
}

// ValidPattern returns why pat is not a valid path pattern, or "". A pattern
// is an absolute clean path whose components are path.Match patterns (*, ?,
// [classes]); a component "**" stands for any number of components. A
// pattern refuses what it matches and everything below it.
func ValidPattern(pat string) string {
	switch {
	case !strings.HasPrefix(pat, "/"):
		return "must be an absolute path pattern"
	case strings.ContainsFunc(pat, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "must not contain control characters"
	case path.Clean(pat) != pat:
		return fmt.Sprintf("must be a clean path (%s)", path.Clean(pat))
	}
	for _, c := range components(pat) {
		if c == "**" {
			continue
		}
		if _, err := path.Match(c, ""); err != nil {
			return fmt.Sprintf("component %q is not a valid pattern (%v)", c, err)
		}
	}
	return ""
}

// Match reports whether pattern matches p or one of its ancestors.
func Match(pattern, p string) bool {
	return matchPrefix(components(pattern), components(p))
}

// matchPrefix reports whether pat matches a leading run of comps.
func matchPrefix(pat, comps []string) bool {
	if len(pat) == 0 {
		return true
	}
	if pat[0] == "**" {
		for i := 0; i <= len(comps); i++ {
			if matchPrefix(pat[1:], comps[i:]) {
				return true
			}
		}
		return false
	}
	if len(comps) == 0 {
		return false
	}
	if ok, _ := path.Match(pat[0], comps[0]); !ok {
		return false
	}
	return matchPrefix(pat[1:], comps[1:])
}

func components(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// FdPath is the canonical path of the open file descriptor fd, as the
// kernel names it (/proc/self/fd/N). A file that was deleted has no path
// left but keeps its inode, which Check compares.
func FdPath(fd int) (string, error) {
	l, err := os.Readlink("/proc/self/fd/" + fmt.Sprint(fd))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(l, " (deleted)"), nil
}
