package policy

import (
	"regexp"
	"slices"
	"strings"
)

// runner judges the programs that run a command given on their command
// line (ip netns exec, prlimit, setarch, systemd-cat, the dynamic
// loader...) or that run commands another way (a compress program, a
// remote shell, a pager, an alias, a D-Bus call another service acts on).
// why != "": the command is opaque. runs: it is a wrapper and rest (never
// empty) is the command it runs, judged on its own. Neither: an ordinary
// command, judged by its name and arguments.
func runner(name string, args []arg) (rest []arg, why string, runs bool) {
	if slices.Contains(perFlag, name) || slices.Contains(archNames, name) || loader.MatchString(name) {
		if slices.ContainsFunc(args, func(x arg) bool { return x.dynamic }) {
			return nil, name + " with a computed argument may run a command (an option such as " + riskyOption(name) + ")", false
		}
	}
	switch {
	case name == "ip":
		return ipRunner(args)
	case name == "prlimit":
		return getoptRunner(name, args, prlimitSpec)
	case name == "setarch" || slices.Contains(archNames, name):
		if name == "setarch" {
			if len(args) == 0 || strings.HasPrefix(args[0].text, "-") {
				return nil, "", false // --list, --help: or a usage error
			}
			args = args[1:] // the architecture
		}
		rest, why, runs = getoptRunner(name, args, setarchSpec)
		if why == "" && !runs && len(rest) == 0 && !slices.ContainsFunc(args, func(x arg) bool { return slices.Contains(setarchSpec.noRun, x.text) }) {
			return nil, name + " without a command starts a shell that runs what it reads", false
		}
		return rest, why, runs
	case name == "systemd-cat":
		return getoptRunner(name, args, systemdCatSpec)
	case name == "systemd-inhibit":
		return getoptRunner(name, args, systemdInhibitSpec)
	case loader.MatchString(name):
		rest, why, runs = getoptRunner(name, args, loaderSpec)
		if runs && !strings.Contains(rest[0].text, "/") {
			// The loader opens its program as a path, not through PATH.
			rest = slices.Clone(rest)
			rest[0].text = "./" + rest[0].text
		}
		return rest, why, runs
	case name == "dbus-send":
		return nil, "dbus-send asks another service to act (a method call), which the policy cannot see", false
	case name == "busctl" || name == "gdbus":
		return nil, dbusCall(name, args), false
	case name == "tar":
		return nil, tarRuns(args), false
	case name == "rsync":
		for _, x := range args {
			if longOpt(x.text, "rsh", "rsync-path", "daemon", "config") || shortOpt(x.text, "e") {
				return nil, "rsync " + x.text + " runs a program (a remote shell, a daemon's scripts)", false
			}
		}
	case name == "tcpdump":
		return nil, tcpdumpRuns(args), false
	case name == "sort":
		return nil, sortRuns(args), false
	case name == "git":
		return nil, gitRuns(args), false
	}
	return nil, "", false
}

// perFlag are the programs judged by their options here: a computed
// argument might be any option, so it makes them opaque.
var perFlag = []string{"ip", "prlimit", "setarch", "systemd-cat", "systemd-inhibit", "busctl", "gdbus", "tar", "rsync", "tcpdump", "sort", "git"}

func riskyOption(name string) string {
	switch name {
	case "ip":
		return "netns exec"
	case "tar":
		return "--to-command"
	case "git":
		return "-c or an alias"
	case "sort":
		return "--compress-program"
	case "rsync":
		return "-e"
	case "tcpdump":
		return "-z"
	}
	return "the command to run"
}

// archNames are setarch's other names (links to it).
var archNames = []string{"linux32", "linux64", "i386", "i486", "i586", "i686", "x86_64", "uname26"}

// loader matches the dynamic loader's names (ld-linux-x86-64.so.2,
// ld-linux.so.2, ld.so, ld-2.36.so, ld64.so.1, ld-musl-x86_64.so.1).
var loader = regexp.MustCompile(`^(ld|ld64|ld-linux[-\w]*|ld-musl-[-\w]+|ld-[0-9.]+)\.so(\.[0-9]+)*$`)

// optSpec describes a program's getopt-style options up to the command it
// runs.
type optSpec struct {
	shortArg string   // single-letter options taking an argument
	shortOpt string   // single-letter options taking an attached optional one
	shortNo  string   // single-letter options without one
	longArg  []string // long options taking an argument (=VAL or the next word)
	longOpt  []string // long options taking an optional =VAL
	longNo   []string // long options without one
	noRun    []string // options after which nothing runs (help, version, list)
	opaque   []string // options that load or run code the policy cannot see
	exact    bool     // long options are exact and their argument the next word (no abbreviations, no =)
}

var (
	prlimitSpec = optSpec{
		shortArg: "op", shortOpt: "cdefilmnqrstuvxy", shortNo: "hV",
		longArg: []string{"--pid", "--output"},
		longOpt: []string{"--core", "--data", "--nice", "--fsize", "--sigpending", "--memlock", "--rss", "--nofile", "--msgqueue", "--rtprio", "--stack", "--cpu", "--nproc", "--as", "--locks", "--rttime"},
		longNo:  []string{"--noheadings", "--raw", "--verbose", "--help", "--version"},
		noRun:   []string{"-h", "-V", "--help", "--version"},
	}
	setarchSpec = optSpec{
		shortNo: "hVv3BFILRSTXZ",
		longNo: []string{"--help", "--version", "--verbose", "--addr-no-randomize", "--fdpic-funcptrs", "--mmap-page-zero", "--addr-compat-layout",
			"--read-implies-exec", "--32bit", "--short-inode", "--whole-seconds", "--sticky-timeouts", "--3gb", "--4gb", "--uname-2.6", "--list"},
		longOpt: []string{"--show"},
		noRun:   []string{"-h", "-V", "--help", "--version", "--list", "--show"},
	}
	systemdCatSpec = optSpec{
		shortArg: "tp", shortNo: "hV",
		longArg: []string{"--identifier", "--priority", "--stderr-priority", "--level-prefix", "--namespace"},
		longNo:  []string{"--help", "--version"},
		noRun:   []string{"-h", "-V", "--help", "--version"},
	}
	systemdInhibitSpec = optSpec{
		shortNo: "h",
		longArg: []string{"--what", "--who", "--why", "--mode"},
		longNo:  []string{"--help", "--version", "--list", "--no-pager", "--no-legend"},
		noRun:   []string{"-h", "--help", "--version", "--list"},
	}
	loaderSpec = optSpec{
		exact:   true,
		longArg: []string{"--inhibit-rpath", "--argv0", "--glibc-hwcaps-mask"},
		longNo:  []string{"--list", "--verify", "--inhibit-cache", "--list-tunables", "--list-diagnostics", "--help", "--version"},
		noRun:   []string{"--list", "--verify", "--list-tunables", "--list-diagnostics", "--help", "--version"},
		opaque:  []string{"--library-path", "--audit", "--preload", "--glibc-hwcaps-prepend"},
	}
)

// getoptRunner reads options as getopt_long does with "+" (they end at
// the first word that is not one): long ones may be abbreviated.
func getoptRunner(name string, args []arg, s optSpec) (rest []arg, why string, runs bool) {
	unknown := func(o string) (rest []arg, why string, runs bool) {
		return nil, name + " with an option the policy does not know (" + o + ") may run a command it cannot see", false
	}
	noRun := false
	i := 0
	for ; i < len(args); i++ {
		t := args[i].text
		if t == "--" {
			i++
			break
		}
		if !strings.HasPrefix(t, "-") || t == "-" {
			break
		}
		if strings.HasPrefix(t, "--") {
			key, _, hasVal := strings.Cut(t, "=")
			if s.exact {
				hasVal = false
			}
			full, ok := s.long(key)
			switch {
			case !ok:
				return unknown(t)
			case slices.Contains(s.opaque, full):
				return nil, name + " " + full + " loads code the policy cannot see", false
			case slices.Contains(s.longArg, full) && !hasVal:
				i++
			}
			noRun = noRun || slices.Contains(s.noRun, full)
			continue
		}
		for j := 1; j < len(t); j++ {
			c := t[j]
			switch {
			case strings.IndexByte(s.shortArg, c) >= 0:
				if j == len(t)-1 {
					i++
				}
				j = len(t)
			case strings.IndexByte(s.shortOpt, c) >= 0:
				j = len(t)
			case strings.IndexByte(s.shortNo, c) >= 0:
				noRun = noRun || slices.Contains(s.noRun, "-"+string(c))
			default:
				return unknown(t)
			}
		}
	}
	if noRun || i >= len(args) {
		return args[min(i, len(args)):], "", false
	}
	return args[i:], "", true
}

// long resolves a long option or an unambiguous abbreviation of one.
func (s optSpec) long(key string) (string, bool) {
	var all []string
	all = append(append(append(append(all, s.longArg...), s.longOpt...), s.longNo...), s.opaque...)
	if slices.Contains(all, key) {
		return key, true
	}
	if s.exact || len(key) < 3 {
		return "", false
	}
	var found []string
	for _, o := range all {
		if strings.HasPrefix(o, key) {
			found = append(found, o)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return "", false
}

// longOpt reports whether t is one of the long options (without their
// "--") or an abbreviation of one (getopt_long and parse-options accept
// any unambiguous prefix; an ambiguous one counts too).
func longOpt(t string, names ...string) bool {
	if !strings.HasPrefix(t, "--") {
		return false
	}
	key, _, _ := strings.Cut(t[2:], "=")
	if key == "" {
		return false
	}
	return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, key) })
}

// shortOpt reports whether t is a bundle of single-letter options holding
// one of letters (a value attached to an earlier letter counts too: the
// answer errs towards opaque).
func shortOpt(t, letters string) bool {
	return strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") && strings.ContainsAny(t[1:], letters)
}

// ipRunner reads ip's global options (one or two dashes, any prefix) and
// its object: "ip [-n NS] [-all] netns exec [NS] CMD" and
// "ip vrf exec VRF CMD" run CMD; "ip -batch FILE" runs ip commands from a
// file, netns exec among them.
func ipRunner(args []arg) (rest []arg, why string, runs bool) {
	all := false
	i := 0
	for ; i < len(args); i++ {
		t := args[i].text
		if t == "--" {
			i++
			break
		}
		if !strings.HasPrefix(t, "-") {
			break
		}
		o := strings.TrimPrefix(t[1:], "-")
		o, _, hasVal := strings.Cut(o, "=")
		pre := func(full string, minLen int) bool { return len(o) >= minLen && strings.HasPrefix(full, o) }
		switch {
		case hasVal && !pre("color", 1) && !pre("colour", 1):
			return nil, "ip with an option the policy does not know (" + t + ") may run a command it cannot see", false
		case pre("batch", 1) || pre("force", 2):
			return nil, "ip " + t + " runs ip commands from a file (netns exec among them), which the policy cannot see", false
		case pre("netns", 1) || pre("loops", 1) || pre("family", 1) || pre("rcvbuf", 2):
			i++
		case pre("all", 1):
			all = true
		case o == "4" || o == "6" || o == "B" || o == "0" || o == "M" || o == "echo" || pre("color", 1) || pre("colour", 1) ||
			pre("human-readable", 1) || pre("iec", 1) || pre("stats", 1) || pre("statistics", 1) || pre("details", 1) || pre("resolve", 1) ||
			pre("oneline", 1) || pre("timestamp", 1) || pre("tshort", 2) || pre("Version", 1) || pre("brief", 2) ||
			pre("json", 1) || pre("pretty", 1) || pre("help", 1) || pre("Numeric", 1):
		default:
			return nil, "ip with an option the policy does not know (" + t + ") may run a command it cannot see", false
		}
	}
	if i+1 >= len(args) {
		return nil, "", false
	}
	obj, sub := args[i].text, args[i+1].text
	isPre := func(s, full string) bool { return s != "" && strings.HasPrefix(full, s) }
	if !isPre(sub, "exec") || !isPre(obj, "netns") && !isPre(obj, "vrf") {
		return nil, "", false
	}
	skip := i + 3 // object, exec, the namespace or VRF
	if all && isPre(obj, "netns") {
		skip = i + 2
	}
	if skip >= len(args) {
		return nil, "", false // nothing to run: ip says so
	}
	return args[skip:], "", true
}

// dbusCall judges busctl and gdbus: reading (list, status, tree,
// introspect, get-property, monitor) is an ordinary command; a method
// call, a property set or a signal asks another service to act, and
// another bus address may be a program to run (unixexec:).
func dbusCall(name string, args []arg) string {
	for _, x := range args {
		t := x.text
		switch {
		case longOpt(t, "address", "host", "machine") || name == "busctl" && shortOpt(t, "HM") || name == "gdbus" && t == "-a":
			return name + " " + t + " reaches another bus (a program run as unixexec:, ssh, a container), which the policy cannot see"
		case t == "call" || t == "set-property" || t == "emit":
			return name + " " + t + " asks another service to act, which the policy cannot see"
		}
	}
	return ""
}

// tarRuns says why tar runs a program: a checkpoint action, a command
// fed the files, a compress program, a remote shell (an archive named
// HOST:FILE), a volume script.
func tarRuns(args []arg) string {
	forceLocal := slices.ContainsFunc(args, func(x arg) bool { return longOpt(x.text, "force-local") && len(x.text) > len("--fo") })
	for i, x := range args {
		t := x.text
		switch {
		case longOpt(t, "checkpoint-action", "to-command", "use-compress-program", "rsh-command", "rmt-command", "info-script", "new-volume-script"):
			return "tar " + t + " runs a program the policy cannot see"
		case strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") && strings.ContainsAny(t, "IF"),
			i == 0 && !strings.HasPrefix(t, "-") && strings.ContainsAny(t, "IF"):
			return "tar " + t + " (-I, -F) runs a program the policy cannot see"
		case !forceLocal && remoteArchive(t):
			return "tar with an archive on HOST:PATH runs a remote shell, which the policy cannot see"
		}
	}
	return ""
}

// remoteArchive reports a word tar would read as HOST:FILE (a colon
// before any slash), alone or after --file= or -f.
func remoteArchive(t string) bool {
	if v, ok := strings.CutPrefix(t, "--file="); ok {
		t = v
	} else if strings.HasPrefix(t, "--") {
		return false
	} else if strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--") {
		if _, v, ok := strings.Cut(t, "f"); ok {
			t = v
		}
	}
	c := strings.IndexByte(t, ':')
	s := strings.IndexByte(t, '/')
	return c > 0 && (s < 0 || c < s)
}

// tcpdumpRuns: -z runs a command on each saved file, -w writes one.
func tcpdumpRuns(args []arg) string {
	for i := 0; i < len(args); i++ {
		t := args[i].text
		if !strings.HasPrefix(t, "-") || strings.HasPrefix(t, "--") {
			continue
		}
		for j := 1; j < len(t); j++ {
			c := t[j]
			switch {
			case c == 'z':
				return "tcpdump -z runs a command the policy cannot see"
			case c == 'w':
				v := t[j+1:]
				if v == "" && i+1 < len(args) {
					v = args[i+1].text
				}
				if v != "-" {
					return "tcpdump -w writes to a file, which command rules do not judge"
				}
			}
			if strings.IndexByte("BcCEFGijmMQrsTVwWyZ", c) >= 0 {
				if j == len(t)-1 {
					i++
				}
				break
			}
		}
	}
	return ""
}

// sortRuns: --compress-program runs a program; -o writes a file.
func sortRuns(args []arg) string {
	for i := 0; i < len(args); i++ {
		t := args[i].text
		if t == "--" {
			return ""
		}
		switch {
		case len(t) > 3 && longOpt(t, "compress-program"):
			return "sort " + t + " runs a program the policy cannot see"
		case len(t) > 2 && longOpt(t, "output"):
			return "sort " + t + " writes to a file, which command rules do not judge"
		case strings.HasPrefix(t, "-") && !strings.HasPrefix(t, "--"):
			for j := 1; j < len(t); j++ {
				c := t[j]
				if c == 'o' {
					v := t[j+1:]
					if v == "" && i+1 < len(args) {
						v = args[i+1].text
					}
					if !harmlessSink(v) {
						return "sort -o writes to a file, which command rules do not judge"
					}
				}
				if strings.IndexByte("kotST", c) >= 0 {
					if j == len(t)-1 {
						i++
					}
					break
				}
			}
		}
	}
	return ""
}

// gitBuiltins are git's own commands: an alias cannot shadow them, so
// "git NAME" runs git's NAME. Any other name may be an alias from the
// config ("!cmd" runs cmd) or a git-NAME program. The ones that run
// commands they are given (bisect run, submodule foreach, difftool,
// filter-branch, hook run...) are left out: they are opaque.
var gitBuiltins = strings.Fields(`add am annotate apply archive blame branch bugreport bundle cat-file check-attr
	check-ignore check-mailmap check-ref-format checkout checkout-index cherry cherry-pick clean clone column commit
	commit-graph commit-tree config count-objects describe diagnose diff diff-files diff-index diff-tree
	fast-export fast-import fetch fetch-pack fmt-merge-msg for-each-ref format-patch fsck fsck-objects gc
	get-tar-commit-id grep hash-object help index-pack init init-db interpret-trailers log ls-files ls-remote ls-tree
	mailinfo mailsplit merge merge-base merge-file merge-index merge-ours merge-recursive merge-subtree merge-tree
	mktag mktree multi-pack-index mv name-rev notes pack-objects pack-redundant pack-refs patch-id prune prune-packed
	pull push range-diff read-tree rebase reflog remote repack replace rerere reset restore rev-list rev-parse revert
	rm send-pack shortlog show show-branch show-index show-ref sparse-checkout stage stash status stripspace switch
	symbolic-ref tag unpack-file unpack-objects update-index update-ref update-server-info var verify-commit
	verify-pack verify-tag version whatchanged worktree write-tree`)

// gitRuns judges git: global options that set config or the programs git
// runs (-c, --config-env, --exec-path=, -p), a command that is not one of
// git's own (an alias), and the options of its commands that run a
// program (rebase --exec, grep -O, fetch --upload-pack, ext:: URLs...) or
// write settings that make later git commands run one (git config).
func gitRuns(args []arg) string {
	i := 0
	for ; i < len(args); i++ {
		t := args[i].text
		if !strings.HasPrefix(t, "-") {
			break
		}
		key, _, hasVal := strings.Cut(t, "=")
		switch {
		case strings.HasPrefix(t, "-c"), key == "--config-env", key == "--exec-path" && hasVal, t == "-p", t == "--paginate":
			return "git " + t + " sets what git runs (config, a pager, its programs), which the policy cannot see"
		case t == "-C":
			i++
		case slices.Contains([]string{"--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source", "--list-cmds"}, key):
			if !hasVal {
				i++
			}
		case slices.Contains([]string{"-P", "--no-pager", "--bare", "--no-replace-objects", "--literal-pathspecs", "--glob-pathspecs",
			"--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks", "--no-advice"}, t):
		case slices.Contains([]string{"--version", "--help", "-v", "-h", "--exec-path", "--html-path", "--man-path", "--info-path"}, t):
			return "" // prints and exits
		default:
			return "git " + t + " is an option the policy does not know; git may run a program it cannot see"
		}
	}
	if i >= len(args) {
		return ""
	}
	sub, opts := args[i].text, args[i+1:]
	if !slices.Contains(gitBuiltins, sub) {
		return "git " + sub + " is not one of git's own commands: an alias or a git-" + sub + " program, which the policy cannot see"
	}
	for _, x := range opts {
		if strings.HasPrefix(x.text, "ext::") || strings.HasPrefix(x.text, "fd::") {
			return "git " + sub + " " + x.text + " runs a command as a transport"
		}
	}
	has := func(long []string, short string) string {
		for _, x := range opts {
			if x.text == "--" {
				return ""
			}
			if longOpt(x.text, long...) && len(x.text) > 3 || short != "" && shortOpt(x.text, short) {
				return x.text
			}
		}
		return ""
	}
	why := func(o string) string { return "git " + sub + " " + o + " runs a program the policy cannot see" }
	switch sub {
	case "clone":
		if o := has([]string{"upload-pack", "template", "config"}, "uc"); o != "" {
			return why(o)
		}
	case "init", "init-db":
		if o := has([]string{"template"}, ""); o != "" {
			return why(o)
		}
	case "fetch", "pull", "ls-remote", "fetch-pack":
		if o := has([]string{"upload-pack"}, ""); o != "" {
			return why(o)
		}
	case "push", "send-pack":
		if o := has([]string{"receive-pack", "exec"}, ""); o != "" {
			return why(o)
		}
	case "archive":
		if o := has([]string{"exec", "remote"}, ""); o != "" {
			return why(o)
		}
	case "rebase":
		if o := has([]string{"exec", "interactive"}, "xi"); o != "" {
			return why(o)
		}
	case "grep":
		if o := has([]string{"open-files-in-pager"}, "O"); o != "" {
			return why(o)
		}
	case "help":
		if o := has([]string{"web", "info", "man"}, "wim"); o != "" {
			return why(o)
		}
	case "log", "show", "diff", "whatchanged", "range-diff", "format-patch", "shortlog", "diff-tree", "diff-index", "diff-files":
		if o := has([]string{"output"}, ""); o != "" {
			return "git " + sub + " " + o + " writes to a file, which command rules do not judge"
		}
	case "config":
		return gitConfig(opts)
	}
	return ""
}

// gitConfig: reading settings is ordinary; writing them (an alias, a
// pager, core.fsmonitor, core.sshCommand, hooks) makes later git commands
// run a program, and --edit runs an editor.
func gitConfig(opts []arg) string {
	const why = "git config writes settings that make later git commands run programs (aliases, pagers, core.fsmonitor), which the policy cannot see"
	var pos []string
	read := false
	for i := 0; i < len(opts); i++ {
		t := opts[i].text
		switch {
		case t == "-l" || t == "--list" || strings.HasPrefix(t, "--get") || t == "--name-only":
			read = true
		case t == "-e" || longOpt(t, "edit", "add", "replace-all", "unset", "unset-all", "rename-section", "remove-section") && len(t) > 3:
			return why
		case t == "-f" || t == "--file" || t == "--blob" || t == "--type" || t == "--default" || t == "--comment":
			i++ // its value is neither a name nor a value
		case strings.HasPrefix(t, "-"):
		default:
			pos = append(pos, t)
		}
	}
	switch {
	case len(pos) > 0 && (pos[0] == "get" || pos[0] == "list"):
		return ""
	case len(pos) > 0 && slices.Contains([]string{"set", "unset", "edit", "rename-section", "remove-section"}, pos[0]):
		return why
	case read || len(pos) <= 1:
		return ""
	}
	return why
}
