package toolerr

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// A full filesystem is UNAVAILABLE and retryable whichever way its error
// arrives, naming the directory and the room needed; anything else is not
// NoSpace's to answer.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rec.json")
	for _, c := range []struct {
		name string
		err  error
		want []string // "" : nil
	}{
		{"write", fmt.Errorf("approvals: %w", &fs.PathError{Op: "write", Path: file, Err: syscall.ENOSPC}), []string{"stored x: no space left on the filesystem of " + dir, "needs at least 16 KiB", "free, "}},
		{"rename", &os.LinkError{Op: "rename", Old: file + ".tmp", New: file, Err: syscall.ENOSPC}, []string{dir}},
		{"quota", &fs.PathError{Op: "open", Path: file, Err: syscall.EDQUOT}, []string{dir}},
		{"bare", syscall.ENOSPC, []string{"filesystem of ? (unknown free"}},
		{"other errno", &fs.PathError{Op: "open", Path: file, Err: syscall.EACCES}, nil},
		{"nil", nil, nil},
		{"plain", errors.New("no space left on device"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := NoSpace(c.err, "stored x", 16<<10)
			if c.want == nil {
				if e != nil {
					t.Fatalf("NoSpace(%v) = %+v, want nil", c.err, e)
				}
				return
			}
			if e == nil || e.Code != mcpwire.CodeUnavailable || !e.Retryable || e.RetryAfterMs != NoSpaceRetryMs {
				t.Fatalf("NoSpace(%v) = %+v, want UNAVAILABLE, retryable, with a retry hint", c.err, e)
			}
			for _, w := range c.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q lacks %q", e.Message, w)
				}
			}
		})
	}
}
