// Package mcpwire holds the MCP wire formats that mcp-backend and its clients
// (mcpctl's probes, the stress, the demo) share: the tool names and their
// admission classes, the /metrics snapshot, the shell.exec result, the
// tool-error envelope with its codes, and the protocol version the clients
// speak. It imports only the standard library, so a client can speak the
// backend's formats without linking the backend.
//
// JSON field names here are a contract with operators and scripts: fields may
// be added, never renamed or removed.
package mcpwire

// ProtocolVersion is the MCP protocol version the clients announce, in the
// MCP-Protocol-Version header and in initialize. Stateless Streamable HTTP
// needs no initialize round trip, only this header.
const ProtocolVersion = "2025-06-18"

// ProtocolVersionHeader is the HTTP header that carries ProtocolVersion.
const ProtocolVersionHeader = "MCP-Protocol-Version"
