package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/state"
	"github.com/overdeck/mcp-backend/ops/systemd"
	"github.com/overdeck/mcp-backend/units"
)

func unitCommand(d *deps) *cli.Command {
	mcpctlFlag := &cli.StringFlag{Name: "mcpctl", Usage: "mcpctl binary the units run (`PATH`; default: this mcpctl)"}
	return &cli.Command{
		Name:  "unit",
		Usage: "render or install the systemd units",
		Subcommands: []*cli.Command{
			{
				Name:      "render",
				Usage:     "print the units (or write them into a directory); touches nothing else",
				UsageText: "mcpctl unit render [--out DIR] [--canary-version V] [--mcpctl PATH]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "out", Usage: "write the units into `DIR` instead of printing them"},
					&cli.StringFlag{Name: "canary-version", Usage: "also render the canary unit, running release `V`"},
					mcpctlFlag,
				},
				Action: func(c *cli.Context) error { return unitRender(c, d) },
			},
			{
				Name:      "install",
				Usage:     "write changed units into unitDir, daemon-reload if any changed, enable the boot units",
				UsageText: "mcpctl unit install [--mcpctl PATH]",
				Flags:     []cli.Flag{mcpctlFlag},
				Action:    func(c *cli.Context) error { return unitInstall(c, d) },
			},
		},
	}
}

// renderUnits loads the config and renders the units; every problem with
// the config or the flags is a usage error (exit 2), found before anything
// is written.
func renderUnits(c *cli.Context, canaryVersion string) (*ctlconfig.Config, []units.Unit, error) {
	cfg, cfgPath, err := loadCtlConfig(c)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.ValidateTunnels(); err != nil {
		return nil, nil, usageError("config: %v", err)
	}
	mcpctl := c.String("mcpctl")
	if mcpctl == "" {
		if mcpctl, err = os.Executable(); err != nil {
			return nil, nil, fmt.Errorf("locate mcpctl: %w", err)
		}
	}
	p := units.Params{Config: cfg, MCPCtl: mcpctl, MCPCtlConfig: cfgPath}
	if canaryVersion != "" {
		if strings.ContainsAny(canaryVersion, "/ \t\n") || canaryVersion == "." || canaryVersion == ".." {
			return nil, nil, usageError("--canary-version %q: must be a release name (no slashes or spaces)", canaryVersion)
		}
		p.CanaryBinary = units.CanaryBinary(cfg, canaryVersion)
	}
	us, err := units.Render(p)
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	return cfg, us, nil
}

type renderedUnit struct {
	Name    string `json:"name"`
	Enable  bool   `json:"enable"`
	Content string `json:"content"`
}

func unitRender(c *cli.Context, d *deps) error {
	_, us, err := renderUnits(c, c.String("canary-version"))
	if err != nil {
		return err
	}
	if out := c.String("out"); out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		for _, u := range us {
			if err := writeFileAtomic(filepath.Join(out, u.Name), u.Content, 0o644); err != nil {
				return err
			}
			if !c.Bool("json") {
				fmt.Fprintln(d.stdout, filepath.Join(out, u.Name))
			}
		}
	}
	if c.Bool("json") {
		list := make([]renderedUnit, 0, len(us))
		for _, u := range us {
			list = append(list, renderedUnit{u.Name, u.Enable, string(u.Content)})
		}
		return writeJSON(d.stdout, list)
	}
	if c.String("out") != "" {
		return nil
	}
	for i, u := range us {
		if i > 0 {
			fmt.Fprintln(d.stdout)
		}
		// Like systemctl cat: the file each block belongs in.
		fmt.Fprintf(d.stdout, "# unit %s\n%s", u.Name, u.Content)
	}
	return nil
}

// unitChange is one unit install wrote.
type unitChange struct {
	Unit   string `json:"unit"`
	Action string `json:"action"` // "created" or "updated"
	Diff   string `json:"diff"`
}

type unitInstallReport struct {
	UnitDir   string       `json:"unitDir"`
	Changed   []unitChange `json:"changed"`
	Unchanged []string     `json:"unchanged"`
	Reloaded  bool         `json:"reloaded"`
	Enabled   []string     `json:"enabled"`
}

func unitInstall(c *cli.Context, d *deps) error {
	cfg, us, err := renderUnits(c, "")
	if err != nil {
		return err
	}
	// One mutating mcpctl at a time: a cutover or install between our
	// read and our write would have its units overwritten.
	unlock, err := state.Lock(cfg.StateDir, "unit install")
	if err != nil {
		return withCode(exitFailed, fmt.Errorf("unit install: nothing written: %w", err))
	}
	defer unlock()

	rep := unitInstallReport{UnitDir: cfg.UnitDir, Changed: []unitChange{}, Unchanged: []string{}, Enabled: []string{}}
	type pending struct {
		u   units.Unit
		old []byte
	}
	var writes []pending
	for _, u := range us {
		old, err := os.ReadFile(filepath.Join(cfg.UnitDir, u.Name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			old = nil
		case err != nil:
			return withCode(exitFailed, fmt.Errorf("read installed unit: %w", err))
		case bytes.Equal(old, u.Content):
			rep.Unchanged = append(rep.Unchanged, u.Name)
			continue
		}
		writes = append(writes, pending{u, old})
	}

	// Connect before writing: without systemd the new files would sit
	// there unloaded, so fail with nothing changed instead.
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
	defer cancel()
	sd, err := systemd.Connect(ctx, systemd.Options{Logger: d.logger})
	if err != nil {
		return withCode(exitFailed, fmt.Errorf("unit install: nothing written: %w", err))
	}
	defer sd.Close()

	if err := os.MkdirAll(cfg.UnitDir, 0o755); err != nil {
		return withCode(exitFailed, fmt.Errorf("unitDir %s: %w", cfg.UnitDir, err))
	}
	for _, w := range writes {
		path := filepath.Join(cfg.UnitDir, w.u.Name)
		action := "updated"
		if w.old == nil {
			action = "created"
		}
		if err := writeFileAtomic(path, w.u.Content, 0o644); err != nil {
			return withCode(exitFailed, fmt.Errorf("unit install: %w (written so far: %d of %d changed units)", err, len(rep.Changed), len(writes)))
		}
		rep.Changed = append(rep.Changed, unitChange{
			Unit: w.u.Name, Action: action,
			Diff: lineDiff(path+" (installed)", path+" (rendered)", string(w.old), string(w.u.Content)),
		})
	}
	if len(rep.Changed) > 0 {
		if err := sd.DaemonReload(ctx); err != nil {
			return withCode(exitFailed, fmt.Errorf("unit install: units written but %w; run systemctl daemon-reload", err))
		}
		rep.Reloaded = true
	}
	for _, u := range us {
		if u.Enable {
			rep.Enabled = append(rep.Enabled, u.Name)
		}
	}
	if err := sd.Enable(ctx, rep.Enabled...); err != nil {
		return withCode(exitFailed, fmt.Errorf("unit install: %w", err))
	}

	if c.Bool("json") {
		return writeJSON(d.stdout, rep)
	}
	printUnitInstall(c, d.stdout, rep)
	return nil
}

func printUnitInstall(c *cli.Context, w io.Writer, rep unitInstallReport) {
	r := lipgloss.NewRenderer(w)
	for _, x := range c.Lineage() {
		if x.Bool("no-color") {
			r.SetColorProfile(termenv.Ascii)
		}
	}
	add := r.NewStyle().Foreground(lipgloss.Color("2"))
	del := r.NewStyle().Foreground(lipgloss.Color("1"))
	hdr := r.NewStyle().Bold(true)
	for _, ch := range rep.Changed {
		fmt.Fprintln(w, hdr.Render(fmt.Sprintf("%s %s", ch.Action, ch.Unit)))
		for _, line := range strings.SplitAfter(ch.Diff, "\n") {
			if line == "" {
				continue
			}
			text := strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "@@"):
				fmt.Fprintln(w, hdr.Render(text))
			case strings.HasPrefix(line, "+"):
				fmt.Fprintln(w, add.Render(text))
			case strings.HasPrefix(line, "-"):
				fmt.Fprintln(w, del.Render(text))
			default:
				fmt.Fprintln(w, text)
			}
		}
	}
	switch {
	case len(rep.Changed) == 0:
		fmt.Fprintf(w, "units in %s are up to date (%d unchanged); no daemon-reload\n", rep.UnitDir, len(rep.Unchanged))
	default:
		fmt.Fprintf(w, "%d unit(s) written to %s, %d unchanged; systemd reloaded\n", len(rep.Changed), rep.UnitDir, len(rep.Unchanged))
	}
	fmt.Fprintf(w, "enabled at boot: %s\n", strings.Join(rep.Enabled, " "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeFileAtomic replaces path with data so that a reader (systemd on a
// reload) sees the old or the new file, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// lineDiff is a small unified diff of two texts: one hunk per run of
// changes with up to 2 lines of context. Unit files are short, so the
// quadratic longest-common-subsequence is fine.
func lineDiff(nameA, nameB, a, b string) string {
	la, lb := splitLines(a), splitLines(b)
	n, m := len(la), len(lb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		text string
		ai   int // line number in a (1-based) of ' ' and '-'
		bi   int // line number in b of ' ' and '+'
	}
	var ops []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && la[i] == lb[j]:
			ops = append(ops, op{' ', la[i], i + 1, j + 1})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			// Deletions first, as diff(1) prints them.
			ops = append(ops, op{'-', la[i], i + 1, j})
			i++
		default:
			ops = append(ops, op{'+', lb[j], i, j + 1})
			j++
		}
	}
	const ctx = 2
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		start := max(k-ctx, 0)
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			// Stop when the next change is farther than 2*ctx lines away.
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		var aStart, bStart, aLen, bLen int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				if aLen == 0 {
					aStart = o.ai
				}
				aLen++
			}
			if o.kind != '-' {
				if bLen == 0 {
					bStart = o.bi
				}
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
		for _, o := range ops[start:end] {
			fmt.Fprintf(&out, "%c%s\n", o.kind, o.text)
		}
		k = end
	}
	return out.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
