package deploy

import (
	"errors"
	"fmt"
	"strings"
)

// Exit codes of mcpctl. Scripts branch on them: keep them exactly.
const (
	CodeOK             = 0
	CodeFailed         = 1 // the operation failed and production is as it was
	CodeUsage          = 2 // usage or config error, found before anything changed
	CodeRolledBack     = 3 // cutover failed verification and the rollback completed
	CodeRollbackFailed = 4 // rollback (or an install's undo) failed: a human is needed
)

// Error is a failure with the exit code it maps to.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// CodeOf is the exit code of err: CodeOK for nil, the code of an *Error in
// its chain, else CodeFailed.
func CodeOf(err error) int {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeFailed
}

func fail(code int, format string, a ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, a...)}
}

// usage is a problem with the configuration or the command line (exit 2),
// found before anything was changed.
func usage(reasons ...string) error {
	return &Error{Code: CodeUsage, Err: errors.New(strings.Join(reasons, "; "))}
}

// refused is a decision not to act (exit 1): nothing was changed.
func refused(reasons []string) error {
	return &Error{Code: CodeFailed, Err: errors.New("refused: " + strings.Join(reasons, "; "))}
}

// undoFailed is a failed install whose undo failed too: the host is neither
// as it was nor installed, and a human is needed (exit 4).
func undoFailed(err, undo error) error {
	return &Error{Code: CodeRollbackFailed, Err: fmt.Errorf("%w; undoing the install failed too: %w", err, undo)}
}
