package demo

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/muesli/termenv"
)

// view prints the demo for people: lipgloss styles when color is on, plain
// ASCII otherwise (not a terminal, NO_COLOR, or a test's buffer).
type view struct {
	w     io.Writer
	color bool
	// work is the demo's work directory, printed once and then shown as
	// $WORK in commands, so the commands stay readable.
	work string

	plain, bold, dim, pass, fail, head lipgloss.Style
}

func newView(w io.Writer, color bool) *view {
	re := lipgloss.NewRenderer(w)
	if !color {
		re.SetColorProfile(termenv.Ascii)
	}
	plain := re.NewStyle()
	return &view{
		w: w, color: color,
		plain: plain,
		bold:  plain.Bold(true),
		dim:   plain.Faint(true),
		pass:  plain.Foreground(lipgloss.Color("2")).Bold(true),
		fail:  plain.Foreground(lipgloss.Color("1")).Bold(true),
		head:  plain.Foreground(lipgloss.Color("6")).Bold(true),
	}
}

func (v *view) short(s string) string {
	if v.work == "" {
		return s
	}
	return strings.ReplaceAll(s, v.work, "$WORK")
}

func (v *view) title(s string) {
	fmt.Fprintln(v.w, v.head.Render("== "+s+" =="))
}

func (v *view) step(n, total int, name string) {
	fmt.Fprintln(v.w)
	fmt.Fprintln(v.w, v.head.Render(fmt.Sprintf("[%d/%d] %s", n, total, name)))
}

// say prints a detail line of the running step.
func (v *view) say(format string, args ...any) {
	fmt.Fprintln(v.w, "  "+v.short(fmt.Sprintf(format, args...)))
}

// command prints an operator's command as it is run.
func (v *view) command(argv []string) {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	fmt.Fprintln(v.w, "  "+v.bold.Render("$ "+v.short(strings.Join(q, " "))))
}

// shellQuote quotes a for a POSIX shell where it needs it, so a printed
// command can be pasted.
func shellQuote(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>*?()[]{}#~!") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// block prints captured output, indented under the step.
func (v *view) block(s string) {
	s = strings.TrimRight(v.short(s), "\n")
	if s == "" {
		return
	}
	for _, line := range strings.Split(s, "\n") {
		fmt.Fprintln(v.w, v.dim.Render("  | ")+line)
	}
}

func (v *view) status(s Status) string {
	switch s {
	case Pass:
		return v.pass.Render(string(s))
	case Fail:
		return v.fail.Render(string(s))
	}
	return v.dim.Render(string(s))
}

func (v *view) verdict(r StepResult) {
	line := fmt.Sprintf("  %s %s", v.status(r.Status), v.dim.Render("("+round(r.Took)+")"))
	if r.Detail != "" {
		line += " " + v.short(r.Detail)
	}
	fmt.Fprintln(v.w, line)
}

func (v *view) table(headers []string, rows [][]string) {
	t := table.New().Headers(headers...).Rows(rows...)
	if v.color {
		t = t.Border(lipgloss.RoundedBorder()).BorderStyle(v.dim)
	} else {
		t = t.Border(lipgloss.ASCIIBorder())
	}
	t = t.StyleFunc(func(row, _ int) lipgloss.Style {
		st := v.plain.Padding(0, 1)
		if row == table.HeaderRow {
			st = st.Inherit(v.bold)
		}
		return st
	})
	for _, line := range strings.Split(t.Render(), "\n") {
		fmt.Fprintln(v.w, "  "+line)
	}
}

// identities shows units' identities before and after, marking changes.
func (v *view) identities(before, after []Identity) {
	rows := make([][]string, 0, len(before))
	for i, b := range before {
		a := Identity{}
		if i < len(after) {
			a = after[i]
		}
		same := "same instance"
		if !b.Same(a) {
			same = v.bold.Render("restarted")
		}
		rows = append(rows, []string{b.Unit, fmt.Sprint(b.MainPID), fmt.Sprint(a.MainPID),
			short(b.InvocationID), short(a.InvocationID), fmt.Sprint(b.NRestarts), fmt.Sprint(a.NRestarts), same})
	}
	v.table([]string{"unit", "MainPID before", "after", "InvocationID before", "after", "NRestarts before", "after", ""}, rows)
}

func (v *view) summary(steps []StepResult, total time.Duration) {
	rows := make([][]string, 0, len(steps))
	for i, s := range steps {
		detail := s.Detail
		if len(detail) > 70 {
			detail = detail[:67] + "..."
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), s.Name, v.status(s.Status), round(s.Took), v.short(detail)})
	}
	fmt.Fprintln(v.w)
	v.title("summary")
	v.table([]string{"#", "step", "result", "took", "detail"}, rows)
	fmt.Fprintf(v.w, "  total %s\n", round(total))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
