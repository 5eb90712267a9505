package deploy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/overdeck/mcp-backend/ops/outcome"
)

// Exit codes of mcpctl, as package outcome defines them (the contract), for
// the callers that speak of deploy's results.
const (
	CodeOK             = outcome.OK
	CodeFailed         = outcome.Failed
	CodeUsage          = outcome.Usage
	CodeRolledBack     = outcome.RolledBack
	CodeRollbackFailed = outcome.RollbackFailed
)

// Error is a failure with the exit code it maps to.
type Error = outcome.Error

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
