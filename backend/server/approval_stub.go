package server

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/overdeck/mcp-backend/backend/caller"
	"github.com/overdeck/mcp-backend/backend/policy"
	"github.com/overdeck/mcp-backend/backend/toolerr"
)

func (s *Server) pendApproval(ctx context.Context, cw caller.Caller, call *mcp.CallToolRequest, d policy.Decision) (approvalNote, *mcp.CallToolResult) {
	return approvalNote{via: "none", answer: "unavailable"}, toolerr.Result(policyRefusal(d, "needs approval, and no one can be asked"))
}
