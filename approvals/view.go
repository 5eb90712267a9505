package approvals

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// What a person is shown of a call before it runs: everything that will
// run, not only the part a rule asked about. The consent form, the
// NEEDS_APPROVAL text and mcpctl approvals show it alike: the whole
// command as written (every part, assignments, here-documents,
// redirections), env and cwd, every other argument, and each part the
// policy judged with the rule that decided it. What is too long is cut
// with a note saying how much, never silently; control characters are
// shown escaped, so a command cannot hide itself from the terminal.

// View is a call as shown for approval.
type View struct {
	Tool string
	// Fields are the call's arguments in order of weight: command first,
	// then env and cwd, then the rest by name.
	Fields []Field
	// Parts are the parts of a shell command the policy judged.
	Parts []mcpwire.JudgedPart
}

// Field is one argument as shown.
type Field struct {
	Name string
	// Value is the string's text (a command, a path), else the JSON value;
	// env is one NAME=value per line.
	Value string
}

// ViewOf builds the view of a call from its arguments (the canonical
// ones the backend stored) and the parts the policy judged.
func ViewOf(tool string, args json.RawMessage, parts []mcpwire.JudgedPart) View {
	v := View{Tool: tool, Parts: parts}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		if len(bytes.TrimSpace(args)) > 0 {
			v.Fields = append(v.Fields, Field{Name: "arguments", Value: string(args)})
		}
		return v
	}
	order := []string{"command", "env", "cwd", "path", "unit", "action", "pid", "signal"}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortStableFunc(keys, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia < 0 {
			ia = len(order)
		}
		if ib < 0 {
			ib = len(order)
		}
		return ia - ib
	})
	for _, k := range keys {
		raw := m[k]
		val := string(raw)
		var s string
		var env map[string]string
		switch {
		case json.Unmarshal(raw, &s) == nil:
			val = s
		case k == "env" && json.Unmarshal(raw, &env) == nil:
			var lines []string
			for _, n := range slices.Sorted(func(yield func(string) bool) {
				for n := range env {
					if !yield(n) {
						return
					}
				}
			}) {
				// One variable a line: a newline in a name or value is
				// shown escaped, or it would read as another variable.
				lines = append(lines, Visible(n, false)+"="+Visible(env[n], false))
			}
			val = strings.Join(lines, "\n")
		}
		v.Fields = append(v.Fields, Field{Name: k, Value: val})
	}
	return v
}

// Text renders the view in full for a person, one field per line,
// multi-line values indented under their name; each value is cut at
// limit bytes (0: never), visibly.
func (v View) Text(limit int) string {
	var b strings.Builder
	for _, f := range v.Fields {
		val := Visible(cut(f.Value, limit), true)
		if strings.Contains(val, "\n") || f.Name == "command" {
			fmt.Fprintf(&b, "%s:\n", f.Name)
			for _, l := range strings.Split(val, "\n") {
				fmt.Fprintf(&b, "  | %s\n", l)
			}
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", f.Name, val)
	}
	if len(v.Parts) > 0 {
		b.WriteString("parts judged:\n")
		max := 0
		if limit > 0 {
			max = maxTextParts
		}
		show, n := shownParts(v.Parts, max)
		for i, p := range v.Parts {
			if show[i] {
				fmt.Fprintf(&b, "  %s\n", partLine(p, limit))
			}
		}
		if n < len(v.Parts) {
			fmt.Fprintf(&b, "  …[%d more parts allowed, not shown]\n", len(v.Parts)-n)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Lines renders the view in a few lines of at most width columns, each
// field wrapped over at most maxFieldLines lines with newlines shown as
// \n, and at most maxLineParts parts (those that asked or denied first);
// width 0 is the whole view, every part, nothing cut. What does not fit
// is cut with a note, never silently.
func (v View) Lines(width int) []string {
	var out []string
	for _, f := range v.Fields {
		out = append(out, wrap(f.Name+": "+Visible(f.Value, false), width, maxFieldLines)...)
	}
	max := 0
	if width > 0 {
		max = maxLineParts
	}
	show, n := shownParts(v.Parts, max)
	for i, p := range v.Parts {
		if show[i] {
			out = append(out, Fit("  "+partLine(p, 0), width))
		}
	}
	if n < len(v.Parts) {
		out = append(out, fmt.Sprintf("  …[%d more parts allowed: mcpctl approvals show]", len(v.Parts)-n))
	}
	return out
}

// shownParts picks at most max parts to show (0: all), those that asked
// or denied first, and says how many.
func shownParts(parts []mcpwire.JudgedPart, max int) ([]bool, int) {
	show := make([]bool, len(parts))
	n := 0
	for _, allowed := range []bool{false, true} {
		for i, p := range parts {
			if (p.Action == "allow" || p.Action == "") == allowed && (max <= 0 || n < max) {
				show[i] = true
				n++
			}
		}
	}
	return show, n
}

// wrap breaks s into lines of width runes, at most max of them, the last
// cut with a note when s is longer (width <= 0: one line, whole).
func wrap(s string, width, max int) []string {
	if width <= 0 {
		return []string{s}
	}
	rs := []rune(s)
	var out []string
	for len(rs) > 0 {
		if len(out) == max-1 || len(rs) <= width {
			out = append(out, Fit(string(rs), width))
			break
		}
		out = append(out, string(rs[:width]))
		rs = rs[width:]
	}
	return out
}

// How many parts a bounded rendering lists.
const (
	maxTextParts  = 32
	maxLineParts  = 6
	maxFieldLines = 4
)

// partLine is a judged part: its action and rule, then the part.
func partLine(p mcpwire.JudgedPart, limit int) string {
	action, rule := p.Action, p.Rule
	if action == "" {
		action, rule = "wrap", "(its command is judged on its own)"
	}
	return fmt.Sprintf("%-5s %s: %s", action, rule, Visible(cut(p.Text, limit), false))
}

// cut shortens s to about n bytes on a rune boundary, saying how much
// was cut (n <= 0: never).
func cut(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return fmt.Sprintf("%s …[%d more bytes cut]", s[:i], len(s)-i)
}

// Fit cuts a line to width columns (runes), saying so.
func Fit(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	rs := []rune(s)
	more := len(s)
	for {
		note := fmt.Sprintf(" …[+%d bytes]", more)
		keep := width - utf8.RuneCountInString(note)
		if keep < 1 {
			return string(rs[:width])
		}
		m := len(s) - len(string(rs[:keep]))
		if m == more {
			return string(rs[:keep]) + note
		}
		more = m
	}
}

// Visible escapes what a terminal would not show as itself: control
// characters (newlines too unless keepNewlines), invalid UTF-8 and
// invisible format characters (bidirectional overrides).
func Visible(s string, keepNewlines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\\' && !keepNewlines:
			b.WriteString(`\\`)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			if r < 0x10000 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
