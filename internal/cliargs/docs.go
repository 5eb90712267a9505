package cliargs

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"mvdan.cc/sh/v3/syntax"
)

// DocLine is a command line of a program quoted in documentation.
type DocLine struct {
	Line  int      // 1-based line of the Markdown text it starts on
	Text  string   // as written (continuations joined)
	Words []string // the program's words; "" for one that is not literal
	// Inline marks a code span in prose, which may name a command group or
	// a flag without its value; a shell code block must be a whole line.
	Inline bool
}

// DocLines returns the command lines of program that markdown quotes: in
// shell code blocks (sh, bash, shell, console) and in inline code spans,
// wherever program is the command (also after "$ ", "sudo ", "env X=Y" or
// a pipe). Lines the shell parser cannot read are left out: the check is
// for the lines an operator would paste.
func DocLines(markdown, program string) []DocLine {
	var out []DocLine
	lines := strings.Split(markdown, "\n")
	fenced, shell := false, false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			switch strings.TrimLeft(t, "`~") {
			case "sh", "bash", "shell", "console":
				shell = fenced
			default:
				shell = false
			}
			continue
		}
		if fenced {
			if !shell {
				continue
			}
			start, text := i+1, l
			for strings.HasSuffix(strings.TrimSpace(text), `\`) && i+1 < len(lines) {
				i++
				text = strings.TrimSuffix(strings.TrimSpace(text), `\`) + " " + lines[i]
			}
			out = append(out, commands(start, text, program, false)...)
			continue
		}
		for _, span := range codeSpans(l) {
			out = append(out, commands(i+1, span, program, true)...)
		}
	}
	return out
}

// CheckDoc reports what l names that app does not have (see Validate; an
// inline span may stop early). Optional parts ("[--all]") are checked as
// if given.
func CheckDoc(app *cli.App, l DocLine) error {
	if l.Inline && len(l.Words) == 0 {
		return nil
	}
	words := []string{app.Name}
	for _, w := range l.Words {
		w = strings.Trim(w, "[]")
		switch {
		case w == "":
			w = "VALUE" // not literal: stands for a value
		case w == "...", w == "|":
			continue
		}
		words = append(words, w)
	}
	return validate(app, l.Text, words, l.Inline)
}

// codeSpans are the inline code spans of a Markdown line.
func codeSpans(l string) []string {
	var out []string
	for {
		a := strings.IndexByte(l, '`')
		if a < 0 {
			return out
		}
		b := strings.IndexByte(l[a+1:], '`')
		if b < 0 {
			return out
		}
		out = append(out, l[a+1:a+1+b])
		l = l[a+b+2:]
	}
}

// commands parses text as shell and returns each simple command whose
// program is program.
func commands(line int, text, program string, inline bool) []DocLine {
	t := strings.TrimSpace(text)
	t = strings.TrimPrefix(t, "$ ")
	if !strings.Contains(t, program) {
		return nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(t), "")
	if err != nil {
		return nil
	}
	var out []DocLine
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok {
			return true
		}
		words := make([]string, len(call.Args))
		for i, w := range call.Args {
			words[i] = literal(w)
		}
		for len(words) > 0 && (words[0] == "sudo" || words[0] == "env" || strings.Contains(words[0], "=")) {
			words = words[1:]
		}
		if len(words) > 0 && (words[0] == program || strings.HasSuffix(words[0], "/"+program)) {
			out = append(out, DocLine{Line: line, Text: t, Words: words[1:], Inline: inline})
		}
		return true
	})
	return out
}

// literal is w's text when it is literal, quoted or not; "" otherwise.
func literal(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return ""
				}
				b.WriteString(l.Value)
			}
		default:
			return ""
		}
	}
	return b.String()
}

// CheckDocFiles checks every command line of app that the Markdown files
// quote: how many there were, and for each that names what app does not
// have an error starting with file:line.
func CheckDocFiles(app *cli.App, files []string) (int, []error) {
	var n int
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range DocLines(string(b), app.Name) {
			n++
			if err := CheckDoc(app, l); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", f, l.Line, err))
			}
		}
	}
	return n, errs
}
