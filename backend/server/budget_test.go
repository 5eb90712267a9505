package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func shellResult(t testing.TB, stdout, stderr string) *mcp.CallToolResult {
	t.Helper()
	b, err := json.Marshal(map[string]any{"exitCode": 0, "signal": nil, "stdout": stdout, "stderr": stderr,
		"timedOut": false, "outputLimited": false, "durationMs": 1})
	if err != nil {
		t.Fatal(err)
	}
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// TestFitResult: whatever the content, the encoded result never exceeds the
// budget, small results pass untouched, and cut ones are flagged.
func TestFitResult(t *testing.T) {
	const budget = 64 << 10
	tests := []struct {
		name           string
		stdout, stderr string
		wantCut        bool
		textOnly       bool // only the text copy had to go
	}{
		{"small passes untouched", "hello\n", "", false, false},
		{"just under with its text copy", strings.Repeat("a", budget/2-2048), "", false, false},
		{"text copy dropped, content intact", strings.Repeat("a", budget/2), "", true, true},
		{"plain text over", strings.Repeat("a", budget), "", true, false},
		{"NUL bytes (6x on encoding)", strings.Repeat("\x00", budget/2), "", true, false},
		{"HTML-escaped characters", strings.Repeat("<&>", budget/3), "", true, false},
		{"invalid UTF-8", strings.Repeat("\xff\xfe", budget/2), "", true, false},
		{"both streams", strings.Repeat("\x1b", budget/4), strings.Repeat(`"\`, budget/4), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := shellResult(t, tc.stdout, tc.stderr)
			got, cut := fitResult(res, budget)
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > budget-envelopeSlack {
				t.Fatalf("encoded %d bytes, over the budget %d", len(b), budget-envelopeSlack)
			}
			if cut != tc.wantCut {
				t.Fatalf("cut = %v, want %v", cut, tc.wantCut)
			}
			if !cut {
				if got != res {
					t.Fatal("an untouched result was copied")
				}
				return
			}
			if tc.textOnly {
				if string(got.StructuredContent.(json.RawMessage)) != string(res.StructuredContent.(json.RawMessage)) {
					t.Fatal("structured content changed although it fit")
				}
				return
			}
			var out map[string]any
			raw, _ := json.Marshal(got.StructuredContent)
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatal(err)
			}
			if out["outputLimited"] != true || out["exitCode"] != float64(0) || got.Meta[truncatedMeta] != true {
				t.Fatalf("flags or fields lost: %v, _meta %v", out, got.Meta)
			}
			if _, added := out["truncated"]; added {
				t.Fatal("a key the output schema does not have was added")
			}
		})
	}
}
