package policy

import (
	"path"
	"regexp"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// A part is one command a shell command line runs (a simple command after
// normalisation), or something in it the parser cannot see through.
type part struct {
	name    string // base name of the command ("rm" for /usr/bin/rm)
	path    string // the name as an allow rule must see it: base name in a standard directory, else the path
	args    []arg
	opaque  string // why the parser cannot see what runs ("" when it can)
	wrapper bool   // a wrapper (sudo, env, nice...): the command it runs is its own part
	text    string // the command as written, for decisions and approvals
}

// Limits of the analysis: beyond them the command is opaque.
const (
	maxNesting = 8    // sh -c inside sh -c ...
	maxParts   = 4096 // simple commands in one command line
)

// analyse parses a command line as bash reads it and returns every part.
// env is the variables the call adds to the shell's environment.
func analyse(cmd string, env map[string]string) []part {
	a := &analysis{}
	for _, k := range slices.Sorted(mapKeys(env)) {
		if dangerousVar(k) {
			a.add(part{opaque: "the call sets " + k + " in the environment, which changes what the shell runs", text: k + "=" + env[k]})
		}
	}
	a.script(cmd, 0)
	return a.parts
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

type analysis struct {
	parts []part
	src   string // the script being walked: node texts are slices of it
}

// text is a node's source as written.
func (a *analysis) text(n syntax.Node) string {
	i, j := int(n.Pos().Offset()), int(n.End().Offset())
	if i < 0 || j > len(a.src) || i > j {
		return "?"
	}
	return clip(a.src[i:j])
}

func (a *analysis) add(p part) {
	if len(a.parts) >= maxParts {
		if len(a.parts) == maxParts {
			a.parts = append(a.parts, part{opaque: "too many commands to judge", text: "..."})
		}
		return
	}
	a.parts = append(a.parts, p)
}

func (a *analysis) script(src string, depth int) {
	if depth > maxNesting {
		a.add(part{opaque: "shell commands nested too deep to judge", text: clip(src)})
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		a.add(part{opaque: "the shell parser cannot read it (" + err.Error() + ")", text: clip(src)})
		return
	}
	outer := a.src
	a.src = src
	syntax.Walk(f, func(n syntax.Node) bool { return a.node(n, depth) })
	a.src = outer
}

// node judges one node of the syntax tree; Walk goes on into its children
// (substitutions, function bodies, subshells...) either way.
func (a *analysis) node(n syntax.Node, depth int) bool {
	switch n := n.(type) {
	case *syntax.CallExpr:
		for _, as := range n.Assigns {
			a.assign(as)
		}
		if len(n.Args) > 0 {
			a.call(n.Args, depth)
		}
	case *syntax.DeclClause:
		for _, as := range n.Args {
			a.assign(as)
		}
	case *syntax.ProcSubst:
		a.add(part{opaque: "process substitution runs a command as a file", text: a.text(n)})
	case *syntax.Redirect:
		a.redirect(n)
	case *syntax.ArithmExp, *syntax.ArithmCmd, *syntax.LetClause, *syntax.CStyleLoop:
		if !arithConstant(n) {
			a.add(part{opaque: "arithmetic on variables can run commands (a[$(...)] in a value)", text: a.text(n)})
		}
	case *syntax.ParamExp:
		if n.Exp != nil && n.Exp.Op == syntax.OtherParamOps {
			a.add(part{opaque: "${...@...} transformations can expand prompts that run commands", text: a.text(n)})
		}
		if (n.Index != nil && !arithConstant(n.Index)) || (n.Slice != nil && (n.Slice.Offset != nil && !arithConstant(n.Slice.Offset) || n.Slice.Length != nil && !arithConstant(n.Slice.Length))) {
			a.add(part{opaque: "arithmetic on variables can run commands (a[$(...)] in a value)", text: a.text(n)})
		}
	case *syntax.BinaryTest:
		switch n.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			if !arithConstant(n.X) || !arithConstant(n.Y) {
				a.add(part{opaque: "[[ ... -eq ... ]] evaluates its operands as arithmetic, which can run commands", text: a.text(n)})
			}
		}
	}
	return true
}

func (a *analysis) assign(as *syntax.Assign) {
	if as.Name != nil && dangerousVar(as.Name.Value) {
		a.add(part{opaque: "assigning " + as.Name.Value + " changes what the shell runs", text: a.text(as)})
		return
	}
	if as.Naked && as.Name == nil && as.Value != nil {
		if w := wordArg(as.Value); w.dynamic || dangerousVar(strings.SplitN(w.text, "=", 2)[0]) {
			a.add(part{opaque: "a declaration with a computed or sensitive name", text: a.text(as)})
		}
	}
}

// writeOps are the redirections that write to a file.
var writeOps = []syntax.RedirOperator{syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrAll, syntax.AppAll, syntax.RdrClob}

func (a *analysis) redirect(r *syntax.Redirect) {
	if r.Word == nil {
		return
	}
	w := wordArg(r.Word)
	switch {
	case slices.Contains(writeOps, r.Op):
		if w.dynamic || !harmlessSink(w.text) {
			a.add(part{opaque: "it writes to a file (" + a.text(r) + "), which command rules do not judge", text: a.text(r)})
		}
	case r.Op == syntax.DplOut || r.Op == syntax.DplIn:
		// >&2, <&0, >&-; bash reads ">&file" as a write to file.
		if w.dynamic || strings.Trim(w.text, "0123456789-") != "" {
			a.add(part{opaque: "it writes to a file (" + a.text(r) + "), which command rules do not judge", text: a.text(r)})
		}
	}
}

func harmlessSink(p string) bool {
	switch p {
	case "/dev/null", "/dev/stdout", "/dev/stderr":
		return true
	}
	return false
}

// call judges one simple command, unwrapping wrappers.
func (a *analysis) call(words []*syntax.Word, depth int) {
	text := a.text(&syntax.CallExpr{Args: words})
	args := make([]arg, len(words))
	for i, w := range words {
		args[i] = wordArg(w)
	}
	for len(args) > 0 {
		first := args[0]
		if first.dynamic {
			a.add(part{opaque: "the command name is computed (" + a.text(words[len(words)-len(args)]) + ")", text: text})
			return
		}
		name, full := first.text, first.text
		if strings.Contains(full, "/") {
			name = path.Base(full)
			if dir := path.Dir(path.Clean(full)); path.IsAbs(full) && standardDir(dir) {
				full = name
			} else if full = path.Clean(full); !strings.Contains(full, "/") {
				full = "./" + full // ./ls is not the ls an allow rule names
			}
		}
		p := part{name: name, path: full, args: args[1:], text: text}
		if why := opaqueCommand(name, args[1:]); why != "" {
			p.opaque = why
			a.add(p)
			return
		}
		if isShell(name) {
			a.shell(p, depth)
			return
		}
		if rest, why, runs := runner(name, args[1:]); why != "" {
			p.opaque = why
			a.add(p)
			return
		} else if runs {
			p.wrapper = true
			a.add(p)
			args = rest
			continue
		}
		rest, known, isWrapper := unwrap(name, args[1:])
		if !isWrapper {
			a.add(p)
			return
		}
		p.wrapper = true
		if !known {
			p.opaque = name + " with options the policy does not know runs a command it cannot see"
			a.add(p)
			return
		}
		a.add(p)
		args = rest
	}
}

// shell judges sh/bash/dash -c STRING by parsing STRING; any other use of
// a shell (a script file, stdin, a login or interactive shell) is opaque.
func (a *analysis) shell(p part, depth int) {
	for i := 0; i < len(p.args); i++ {
		x := p.args[i]
		if x.dynamic {
			break
		}
		switch {
		case x.text == "-c" && i+1 < len(p.args) && !p.args[i+1].dynamic:
			a.add(part{name: p.name, path: p.path, args: p.args, wrapper: true, text: p.text})
			a.script(p.args[i+1].text, depth+1)
			return
		case x.text == "-e" || x.text == "-u" || x.text == "-x" || x.text == "-o" && i+1 < len(p.args) && p.args[i+1].text == "pipefail":
			if x.text == "-o" {
				i++
			}
			continue
		}
		break
	}
	p.opaque = p.name + " runs commands the policy cannot see (only " + p.name + " -c 'LITERAL' is parsed)"
	a.add(p)
}

func isShell(name string) bool {
	switch name {
	case "sh", "bash", "dash", "rbash":
		return true
	}
	return false
}

// opaqueCommand says why a command runs code the parser cannot see, or "".
func opaqueCommand(name string, args []arg) string {
	switch name {
	case "eval", "source", ".", "trap", "alias", "enable", "hash", "fc", "complete", "compgen", "bind":
		return name + " runs a string as shell code"
	case "zsh", "ksh", "mksh", "ksh93", "csh", "tcsh", "fish", "ash", "yash", "posh",
		"perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "luajit", "tclsh", "wish", "expect",
		"Rscript", "R", "julia", "pwsh", "guile", "irb", "jshell", "gdb", "lldb",
		"xargs", "parallel", "watch", "flock", "su", "runuser", "chroot", "unshare", "nsenter",
		"systemd-run", "script", "ssh", "strace", "ltrace", "valgrind", "taskset", "setpriv", "capsh",
		"vi", "vim", "nvim", "view", "ex", "ed", "emacs", "less", "more", "man", "busybox", "at", "batch", "crontab":
		return name + " runs code or commands given to it, which the policy cannot see"
	case "awk", "gawk", "mawk", "nawk":
		for _, x := range args {
			if x.dynamic || x.text == "-f" || strings.HasPrefix(x.text, "--file") || strings.ContainsAny(x.text, "|") ||
				strings.Contains(x.text, "system") || strings.Contains(x.text, "getline") || strings.HasPrefix(x.text, "-E") {
				return name + " with system(), pipes, getline or a program file runs commands the policy cannot see"
			}
		}
	case "sed":
		for _, x := range args {
			if x.dynamic || x.text == "-f" || strings.HasPrefix(x.text, "--file") || sedExec.MatchString(x.text) {
				return "sed with the e command or a script file runs commands the policy cannot see"
			}
		}
	case "find":
		for _, x := range args {
			switch x.text {
			case "-exec", "-execdir", "-ok", "-okdir":
				return "find " + x.text + " runs a command for each file"
			case "-fprint", "-fprint0", "-fprintf", "-fls":
				return "find " + x.text + " writes to a file, which command rules do not judge"
			}
			if x.dynamic {
				return "find with a computed argument may run a command (-exec)"
			}
		}
	case "mapfile", "readarray":
		for _, x := range args {
			if x.text == "-C" || strings.HasPrefix(x.text, "-C") {
				return name + " -C runs a callback"
			}
		}
	}
	if strings.HasPrefix(name, "python") || strings.HasPrefix(name, "pypy") || strings.HasPrefix(name, "perl5") {
		return name + " runs code given to it, which the policy cannot see"
	}
	switch name {
	case "read", "mapfile", "readarray", "getopts", "printf", "declare", "typeset", "export", "local", "readonly", "unset", "set", "shopt":
		for _, x := range args {
			n := strings.SplitN(x.text, "=", 2)[0]
			if x.dynamic || dangerousVar(n) || (name == "set" || name == "shopt") && strings.HasPrefix(x.text, "-") && strings.ContainsAny(x.text, "ox") && len(args) > 1 {
				return name + " may change variables or options that change what the shell runs"
			}
		}
	}
	return ""
}

// sedExec finds GNU sed's e command or s///e flag.
var sedExec = regexp.MustCompile(`(^|[;{}\n0-9$/!]\s*)e(\s|$|;)|s(.).*(.).*[^\\]/[gpiImMw0-9]*e[gpiImMw0-9]*($|[\s;}])`)

// unwrap returns the command a wrapper runs: rest is it, known whether
// the wrapper's options were understood, isWrapper whether name is one.
func unwrap(name string, args []arg) (rest []arg, known, isWrapper bool) {
	type spec struct {
		withArg  string // options taking an argument (single letters)
		longArg  []string
		noExec   string // options after which nothing runs (help, version, list)
		leadArgs int    // positional arguments before the command (timeout's duration)
	}
	specs := map[string]spec{
		"command": {noExec: "vV"},
		"builtin": {},
		"exec":    {withArg: "a"},
		"env":     {withArg: "uC", longArg: []string{"--unset", "--chdir"}},
		"sudo":    {withArg: "ugCDhprtUT", longArg: []string{"--user", "--group", "--chdir", "--host", "--prompt", "--role", "--type", "--other-user", "--command-timeout", "--close-from"}, noExec: "lVKkvse"},
		"doas":    {withArg: "uC", noExec: "Ls"},
		"nice":    {withArg: "n", longArg: []string{"--adjustment"}},
		"ionice":  {withArg: "cnP", longArg: []string{"--class", "--classdata"}, noExec: "p"},
		"timeout": {withArg: "sk", longArg: []string{"--signal", "--kill-after"}, leadArgs: 1},
		"nohup":   {},
		"setsid":  {},
		"stdbuf":  {withArg: "ioe", longArg: []string{"--input", "--output", "--error"}},
		"time":    {withArg: "fo", longArg: []string{"--format", "--output"}},
		"chrt":    {leadArgs: 1},
	}
	s, ok := specs[name]
	if !ok {
		return nil, false, false
	}
	i := 0
	for i < len(args) {
		x := args[i]
		if x.dynamic {
			return nil, false, true
		}
		t := x.text
		if t == "--" {
			i++
			break
		}
		if name == "env" && (t == "-" || t == "-i" || t == "-0" || t == "--ignore-environment" || t == "--null" || t == "-v") {
			i++
			continue
		}
		if name == "env" && (strings.HasPrefix(t, "-S") || strings.HasPrefix(t, "--split-string")) {
			return nil, false, true
		}
		if !strings.HasPrefix(t, "-") || t == "-" {
			break
		}
		if name == "nice" && len(t) > 1 && strings.Trim(t[1:], "0123456789") == "" {
			i++ // nice -5
			continue
		}
		if strings.HasPrefix(t, "--") {
			key, _, hasVal := strings.Cut(t, "=")
			if slices.Contains(s.longArg, key) {
				if !hasVal {
					i++
				}
				i++
				continue
			}
			switch t {
			case "--foreground", "--preserve-status", "--verbose", "--preserve-env", "--login", "--background", "--non-interactive", "--reset", "--fork", "--wait", "--ctty", "--portability", "--append":
				if name == "sudo" && t == "--login" {
					return nil, true, true // sudo --login: a login shell, no command
				}
				i++
				continue
			}
			if t == "--help" || t == "--version" || t == "--list" {
				return nil, true, true
			}
			return nil, false, true
		}
		// Bundled single-letter options: -iu root, -n5.
		for j := 1; j < len(t); j++ {
			c := t[j]
			if strings.IndexByte(s.noExec, c) >= 0 {
				if name == "sudo" && (c == 's' || c == 'e') || name == "doas" && c == 's' {
					return nil, false, true // a shell or an editor
				}
				return nil, true, true
			}
			if strings.IndexByte(s.withArg, c) >= 0 {
				if j == len(t)-1 {
					i++
				}
				break
			}
			if !knownFlag(name, c) {
				return nil, false, true
			}
		}
		i++
	}
	if name == "env" || name == "sudo" {
		for i < len(args) && !args[i].dynamic && validAssign(args[i].text) {
			if dangerousVar(strings.SplitN(args[i].text, "=", 2)[0]) {
				return nil, false, true
			}
			i++
		}
	}
	i += s.leadArgs
	if i >= len(args) {
		return nil, true, true
	}
	return args[i:], true, true
}

// knownFlag lists the options without an argument each wrapper has.
func knownFlag(name string, c byte) bool {
	flags := map[string]string{
		"command": "p",
		"exec":    "cl",
		"sudo":    "AbEHknPSBN",
		"doas":    "n",
		"nice":    "",
		"ionice":  "t",
		"timeout": "v",
		"setsid":  "cfw",
		"time":    "apqv",
		"chrt":    "abdefiopmrR",
		"env":     "iv0",
	}
	return strings.IndexByte(flags[name], c) >= 0
}

func validAssign(s string) bool {
	n, _, ok := strings.Cut(s, "=")
	if !ok || n == "" {
		return false
	}
	for i, r := range n {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// dangerousVar reports variables whose value changes which program runs
// or makes a shell or interpreter run code on its own.
func dangerousVar(n string) bool {
	switch n {
	case "PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "GLOBIGNORE", "CDPATH",
		"PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
		"PAGER", "EDITOR", "VISUAL", "SYSTEMD_PAGER", "LESSOPEN", "LESSCLOSE", "MANPAGER", "BROWSER", "TERMINFO", "HOSTALIASES",
		// Configuration read from a file the variable names, which can run
		// commands (apt's hooks, dpkg's and debconf's, pagers and editors,
		// OpenSSL's engines, the JVM's agents).
		"APT_CONFIG", "SYSTEMD_EDITOR", "SYSTEMD_PAGERSECURE", "SUDO_EDITOR", "SUDO_ASKPASS", "SSH_ASKPASS", "LESSKEY", "LESSKEYIN", "LESSKEY_SYSTEM",
		"MANOPT", "OPENSSL_CONF", "OPENSSL_ENGINES", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS",
		"WGETRC", "CURL_HOME", "TERMINFO_DIRS", "BASH_LOADABLES_PATH":
		return true
	}
	return strings.HasPrefix(n, "LD_") || strings.HasPrefix(n, "BASH_FUNC_") || strings.HasPrefix(n, "GIT_") || strings.HasPrefix(n, "GCONV") ||
		strings.HasPrefix(n, "DPKG_") || strings.HasPrefix(n, "DEBCONF_") || strings.HasPrefix(n, "APT_")
}

// wordArg removes quotes from a literal word; anything the shell would
// expand (parameters, substitutions, unquoted globs, braces, tildes,
// $'...') makes it dynamic.
func wordArg(w *syntax.Word) arg {
	var b strings.Builder
	for i, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v := p.Value
			if i == 0 && strings.HasPrefix(v, "~") {
				return arg{dynamic: true}
			}
			for j := 0; j < len(v); j++ {
				c := v[j]
				switch {
				case c == '\\' && j+1 < len(v):
					j++
					b.WriteByte(v[j])
				case c == '*' || c == '?' || c == '[':
					return arg{dynamic: true}
				case c == '{' && (strings.Contains(v[j:], ",") || strings.Contains(v[j:], "..")):
					return arg{dynamic: true}
				default:
					b.WriteByte(c)
				}
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				return arg{dynamic: true}
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return arg{dynamic: true}
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return arg{dynamic: true}
				}
				v := l.Value
				for j := 0; j < len(v); j++ {
					if v[j] == '\\' && j+1 < len(v) && strings.IndexByte("$`\"\\\n", v[j+1]) >= 0 {
						j++
					}
					b.WriteByte(v[j])
				}
			}
		default:
			return arg{dynamic: true}
		}
	}
	return arg{text: b.String()}
}

// arithConstant reports whether an arithmetic expression holds only
// numbers (a name or an expansion may evaluate a value as code).
func arithConstant(n syntax.Node) bool {
	ok := true
	syntax.Walk(n, func(m syntax.Node) bool {
		switch m := m.(type) {
		case *syntax.Word:
			l := m.Lit()
			if l == "" || strings.Trim(l, "0123456789") != "" {
				ok = false
			}
			return false
		case *syntax.ParamExp, *syntax.CmdSubst:
			ok = false
		}
		return ok
	})
	return ok
}

// clip bounds text shown in decisions.
func clip(s string) string {
	const maxText = 512
	if len(s) > maxText {
		return s[:maxText] + "..."
	}
	return s
}
