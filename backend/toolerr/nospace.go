package toolerr

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// NoSpaceRetryMs is the retry hint of a refusal for a full filesystem:
// room comes back when an operator or a retention frees it, not in
// milliseconds.
const NoSpaceRetryMs = 30000

// NoSpace is the one answer for a call refused because a filesystem is
// full (ENOSPC, or EDQUOT for a quota): UNAVAILABLE and retryable, naming
// what could not be stored, the directory it goes to, the room left there
// and need, the bytes it takes. It returns nil for any other error, which
// the caller answers as before.
func NoSpace(err error, what string, need int64) *Error {
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return nil
	}
	dir := "?"
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		dir = filepath.Dir(pe.Path)
	case errors.As(err, &le):
		dir = filepath.Dir(le.New)
	}
	free := "unknown"
	var st syscall.Statfs_t
	if dir != "?" && syscall.Statfs(dir, &st) == nil {
		free = fmtBytes(int64(st.Bavail) * st.Bsize)
	}
	e := New(mcpwire.CodeUnavailable, "%s: no space left on the filesystem of %s (%s free, needs at least %s): free space there, then retry",
		what, dir, free, fmtBytes(need))
	e.RetryAfterMs = NoSpaceRetryMs
	return e
}

// fmtBytes is n bytes in the largest binary unit that keeps it whole
// enough to read.
func fmtBytes(n int64) string {
	const k = 1024
	switch {
	case n >= 10*k*k:
		return strconv.FormatInt(n/(k*k), 10) + " MiB"
	case n >= 10*k:
		return strconv.FormatInt(n/k, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
