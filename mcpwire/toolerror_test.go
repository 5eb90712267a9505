package mcpwire

import (
	"encoding/json"
	"testing"

	"github.com/overdeck/mcp-backend/internal/golden"
)

// TestErrorEnvelopeGolden pins the envelope clients parse: an OVERLOADED
// error with its scope and retry hint, and a plain one without them.
func TestErrorEnvelopeGolden(t *testing.T) {
	var out []byte
	for _, e := range []ToolError{
		{Code: CodeOverloaded, Message: "backend overloaded: your conversation holds the most queue places; retry later", Retryable: true, Scope: ScopeConversation, RetryAfterMs: 1250},
		{Code: CodeOverloaded, Message: "backend overloaded", Retryable: true, Scope: ScopeServer, RetryAfterMs: 50},
		{Code: CodeNotFound, Message: "no such file", Retryable: false},
	} {
		b, err := json.Marshal(ErrorEnvelope{Error: &e})
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), '\n')
	}
	golden.Check(t, "error-envelopes.golden.json", out)
}
