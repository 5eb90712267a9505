// Command mcp-backend is the hardened local MCP server through which many
// ChatGPT conversations operate one host. Overload is a bounded, explicit
// condition (an OVERLOADED tool error), never unbounded work.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// `mcp-backend sandbox-exec` (the helper every shell command runs
	// through) runs from this package's init and never reaches main.
	_ "github.com/overdeck/mcp-backend/backend/sandbox"
)

func main() {
	catchSIGPIPE()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdin, os.Stdout, newLogSink(os.Stderr))
	stop()
	os.Exit(code)
}
