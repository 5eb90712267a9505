// Package clients holds the real-client conformance suite: independently
// written MCP clients (the official TypeScript SDK, MCP Inspector's CLI, the
// official conformance suite and the Go SDK) driven against the real
// mcp-backend binary over Streamable HTTP and stdio. The Node clients are
// pinned in testdata/clients at the repository root and installed there by
// scripts/ensure-deps.sh.
package clients
