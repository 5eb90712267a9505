// Package view is the human form of mcpctl's reports: the few styles and
// the table every screen uses (lipgloss, colour only on a terminal), and
// the screens themselves: status; install, canary and unit install; the
// fleet's live run, plan and status; the snapshot listing and manifest.
// The JSON forms are the reports' own types; nothing here decides anything.
package view

import (
	"io"
	"os"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"
	"golang.org/x/term"
)

// TextWidth is the width human output fits by default.
const TextWidth = 80

// Styles are the few text styles every human form uses.
type Styles struct {
	Title, OK, Warn, Bad, Dim lipgloss.Style
}

// Verdict is PASS or FAIL, styled.
func (s Styles) Verdict(ok bool) string {
	if ok {
		return s.OK.Render("PASS")
	}
	return s.Bad.Render("FAIL")
}

// Printer styles text for one writer: colour only on a terminal, never
// with noColor.
type Printer struct {
	R     *lipgloss.Renderer
	Color bool
	// Wide lets tables and lines take the width they need; by default they
	// fit TextWidth columns.
	Wide bool
	St   Styles
}

// NewPrinter styles w: colour only on a terminal, never with noColor.
func NewPrinter(w io.Writer, noColor bool) *Printer {
	r := lipgloss.NewRenderer(w)
	f, isFile := w.(*os.File)
	color := !noColor && isFile && term.IsTerminal(int(f.Fd()))
	if !color {
		r.SetColorProfile(termenv.Ascii)
	}
	return &Printer{R: r, Color: color, St: Styles{
		Title: r.NewStyle().Bold(true),
		OK:    r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		Warn:  r.NewStyle().Foreground(lipgloss.Color("3")).Bold(true),
		Bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		Dim:   r.NewStyle().Faint(true),
	}}
}

// Width is the width tables and lines must fit, 0 for any (Wide).
func (p *Printer) Width() int {
	if p.Wide {
		return 0
	}
	return TextWidth
}

// Table draws a lipgloss table: rounded borders on a colour terminal,
// space-separated columns otherwise (easy to read and to grep).
func (p *Printer) Table(headers []string, rows [][]string) string {
	t := table.New().Headers(headers...).Rows(rows...)
	if !p.Color || p.R.ColorProfile() == termenv.Ascii {
		out := t.Border(lipgloss.HiddenBorder()).BorderTop(false).BorderBottom(false).
			BorderLeft(false).BorderRight(false).BorderHeader(false).
			StyleFunc(func(_, _ int) lipgloss.Style { return p.R.NewStyle().PaddingRight(1) }).String()
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return strings.Join(lines, "\n")
	}
	header := p.R.NewStyle().Bold(true).Padding(0, 1)
	cell := p.R.NewStyle().Padding(0, 1)
	return t.Border(lipgloss.RoundedBorder()).BorderStyle(p.R.NewStyle().Foreground(lipgloss.Color("8"))).
		StyleFunc(func(row, _ int) lipgloss.Style {
			if row == table.HeaderRow {
				return header
			}
			return cell
		}).String()
}
