// Command mcpctl is the operator's CLI that deploys mcp-backend safely:
// units with guardrails, blue/green canary, overload stress, and cutover with
// an automatic rollback armed over D-Bus.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
