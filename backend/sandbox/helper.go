package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Exit codes of the helper: ExitUsage for a command line the backend
// never builds, ExitSetup when the profile could not be set up (the
// command never ran; bash's 126 and 127 are taken).
const (
	ExitUsage = 2
	ExitSetup = 125
)

// The helper runs from this package's init, before main and before every
// package initialised after this one: any binary that links this package
// (mcp-backend, and the test binaries that start a server in process) is
// the helper when its first argument is HelperCommand. That keeps one
// artifact and spares each command the backend's own start-up (its
// command-line parser and the initialisation of packages it never uses).
func init() {
	if len(os.Args) < 2 || os.Args[1] != HelperCommand {
		return
	}
	os.Exit(helperMain(os.Args[2:], os.Stderr))
}

// helperMain is `sandbox-exec --spec JSON -- PROGRAM ARGS...` (what
// Command builds); it returns only when the command could not start.
func helperMain(args []string, stderr io.Writer) int {
	if len(args) < 4 || args[0] != "--spec" || args[2] != "--" || !filepath.IsAbs(args[3]) {
		fmt.Fprintf(stderr, "%s: usage: %s --spec JSON -- PROGRAM ARGS... (an absolute program)\n", HelperCommand, HelperCommand)
		return ExitUsage
	}
	err := Enter(args[1], args[3:])
	fmt.Fprintln(stderr, err)
	return ExitSetup
}
