package units

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/overdeck/mcp-backend/internal/atomicfs"
)

// Change is a rendered unit whose installed file differs (Old is nil when
// there is none).
type Change struct {
	Unit Unit
	Old  []byte
}

// Created reports a unit that has no installed file yet.
func (c Change) Created() bool { return c.Old == nil }

// Changes compares the rendered units with the files in dir: the units whose
// files differ or are missing, and the names of those already up to date.
func Changes(dir string, us []Unit) (changed []Change, unchanged []string, err error) {
	for _, u := range us {
		old, err := os.ReadFile(filepath.Join(dir, u.Name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			old = nil
		case err != nil:
			return nil, nil, fmt.Errorf("read installed unit: %w", err)
		case bytes.Equal(old, u.Content):
			unchanged = append(unchanged, u.Name)
			continue
		}
		changed = append(changed, Change{Unit: u, Old: old})
	}
	return changed, unchanged, nil
}

// Write writes each unit into dir (created when missing), each file replaced
// atomically so that systemd on a reload reads the old or the new unit,
// never a part.
func Write(dir string, us ...Unit) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("unit dir %s: %w", dir, err)
	}
	for _, u := range us {
		p := filepath.Join(dir, u.Name)
		if err := atomicfs.WriteFile(p, u.Content, 0o644); err != nil {
			return fmt.Errorf("write unit %s: %w", p, err)
		}
	}
	return nil
}

// Sync writes the units whose files in dir differ and returns the names it
// wrote. The caller reloads systemd when the list is not empty.
func Sync(dir string, us []Unit) ([]string, error) {
	changed, _, err := Changes(dir, us)
	if err != nil {
		return nil, err
	}
	var written []string
	for _, c := range changed {
		if err := Write(dir, c.Unit); err != nil {
			return written, err
		}
		written = append(written, c.Unit.Name)
	}
	return written, nil
}

// Diff is a small unified diff of two texts: one hunk per run of
// changes with up to 2 lines of context. Unit files are short, so the
// quadratic longest-common-subsequence is fine.
func Diff(nameA, nameB, a, b string) string {
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
