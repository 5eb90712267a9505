// Package textwrap wraps the long lines of human output at spaces, so
// reports fit a terminal of a given width.
package textwrap

import "strings"

// Wrap breaks each line of s longer than width columns at its last space
// that fits; continuation lines start with indent. Lines that fit, leading
// indentation and inner spacing stay as they are; a word longer than the
// width stays whole. width <= 0 returns s unchanged.
func Wrap(s string, width int, indent string) string {
	if width <= 0 {
		return s
	}
	lines := strings.Split(s, "\n")
	var out []string
	for _, l := range lines {
		out = append(out, wrapLine([]rune(l), width, []rune(indent))...)
	}
	return strings.Join(out, "\n")
}

func wrapLine(l []rune, width int, indent []rune) []string {
	var out []string
	lead := 0
	for lead < len(l) && l[lead] == ' ' {
		lead++
	}
	for len(l) > width {
		cut := -1
		for i := width; i > lead; i-- {
			if l[i] == ' ' {
				cut = i
				break
			}
		}
		if cut < 0 { // one long word: break after it
			for i := width; i < len(l); i++ {
				if l[i] == ' ' {
					cut = i
					break
				}
			}
		}
		if cut < 0 {
			break
		}
		out = append(out, strings.TrimRight(string(l[:cut]), " "))
		rest := []rune(strings.TrimLeft(string(l[cut:]), " "))
		l = append(append([]rune{}, indent...), rest...)
		lead = len(indent)
	}
	return append(out, string(l))
}
