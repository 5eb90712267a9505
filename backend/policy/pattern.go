package policy

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// A command pattern is words separated by spaces. The first names the
// command: a bare name matches the command wherever it lives in the
// standard directories (/usr/bin/rm is rm), a path matches that path. The
// others match one argument each: "*" inside a word matches any
// characters but "/", "**" any characters, "?" one, "[...]" a class; a
// word that is "*" alone matches any number of arguments (none included).
// A pattern of one word matches the command with any arguments: "rm" is
// "rm *".
type cmdPattern struct {
	src   string
	name  string
	words []*wordPattern // nil entry: "*" alone
}

type wordPattern struct {
	lit string         // when re is nil
	re  *regexp.Regexp // when the word has wildcards
}

func (w *wordPattern) match(s string) bool {
	if w.re == nil {
		return w.lit == s
	}
	return w.re.MatchString(s)
}

func compileCommand(src string) (*cmdPattern, error) {
	if strings.ContainsFunc(src, isControl) {
		return nil, fmt.Errorf("must not contain control characters")
	}
	f := strings.Fields(src)
	if len(f) == 0 {
		return nil, fmt.Errorf("must name a command, e.g. \"apt-get install *\" or \"systemctl restart nginx\"")
	}
	name := f[0]
	if strings.ContainsAny(name, "*?[") {
		return nil, fmt.Errorf("the command name %q must be literal (a glob in a command name is refused as opaque, so it %w)", name, errNever)
	}
	if strings.Contains(name, "/") && path.Clean(name) != name || strings.HasSuffix(name, "/") {
		return nil, fmt.Errorf("the command path %q must be clean (%s)", name, path.Clean(name))
	}
	if path.IsAbs(name) && standardDir(path.Dir(name)) {
		name = path.Base(name) // "/usr/bin/rm" is "rm"
	}
	p := &cmdPattern{src: src, name: name}
	if len(f) == 1 {
		p.words = []*wordPattern{nil}
		return p, nil
	}
	for _, w := range f[1:] {
		if w == "*" {
			p.words = append(p.words, nil)
			continue
		}
		wp, err := compileWord(w)
		if err != nil {
			return nil, fmt.Errorf("word %q: %w", w, err)
		}
		p.words = append(p.words, wp)
	}
	return p, nil
}

func compileWord(w string) (*wordPattern, error) {
	if !strings.ContainsAny(w, "*?[") {
		return &wordPattern{lit: w}, nil
	}
	re, err := globRegexp(w, "[^/]*", ".*", false)
	if err != nil {
		return nil, err
	}
	return &wordPattern{re: re}, nil
}

// arg is one argument of a simple command as the parser saw it: its text
// after quote removal when it is literal, else dynamic (an expansion, a
// substitution, an unquoted glob or brace: the shell decides its words).
type arg struct {
	text    string
	dynamic bool
}

// match reports whether p matches the command name and args. For a deny
// or ask rule (loose), a dynamic argument may be anything, so it matches
// any run of pattern words; for an allow rule it matches only a "*" word.
func (p *cmdPattern) match(name string, args []arg, loose bool) bool {
	if name != p.name {
		return false
	}
	return matchWords(p.words, args, loose)
}

func matchWords(ws []*wordPattern, args []arg, loose bool) bool {
	if len(ws) == 0 {
		if len(args) == 0 {
			return true
		}
		// A dynamic argument may expand to nothing.
		return loose && args[0].dynamic && matchWords(ws, args[1:], loose)
	}
	if ws[0] == nil { // "*": any number of arguments
		for i := 0; i <= len(args); i++ {
			if matchWords(ws[1:], args[i:], loose) {
				return true
			}
		}
		return false
	}
	if len(args) == 0 {
		return false
	}
	a := args[0]
	if a.dynamic {
		if !loose {
			return false
		}
		// It may expand to any number of words, this one's included.
		for i := 0; i <= len(ws); i++ {
			if matchWords(ws[i:], args[1:], loose) {
				return true
			}
		}
		return false
	}
	return ws[0].match(a.text) && matchWords(ws[1:], args[1:], loose)
}

// standardDir reports whether d is one of the directories PATH names on
// a Debian host: a command there is known by its base name.
func standardDir(d string) bool {
	switch d {
	case "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin":
		return true
	}
	return false
}

// globRegexp compiles a glob that must match a whole string: "*" stands
// for star and a run of two or more for double, "?" for any one
// character, "[...]" for one of a class ("[!...]" or "[^...]" none of
// it), and with escapes "\" makes the next character literal.
func globRegexp(src, star, double string, escapes bool) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '*':
			n := 1
			for i+1 < len(src) && src[i+1] == '*' {
				i++
				n++
			}
			if n > 1 {
				b.WriteString(double)
			} else {
				b.WriteString(star)
			}
		case c == '?':
			b.WriteString(".")
		case c == '\\' && escapes:
			if i+1 >= len(src) {
				return nil, fmt.Errorf("a trailing \\ escapes nothing")
			}
			i++
			b.WriteString(regexp.QuoteMeta(src[i : i+1]))
		case c == '[':
			j := strings.IndexByte(src[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed [")
			}
			class := src[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			if class == "" || class == "^" {
				return nil, fmt.Errorf("empty []")
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
