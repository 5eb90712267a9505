package clients

import (
	"strings"
	"testing"
)

// conformanceCLI is the official MCP conformance suite.
const conformanceCLI = "node_modules/@modelcontextprotocol/conformance/dist/index.js"

// The server scenarios of the official conformance suite that apply to
// this server. The others need the suite's own fixture tools, resources or
// prompts (tools-call-*, resources-*, prompts-*, json-schema-2020-12),
// capabilities this server does not offer (logging, completion, sampling,
// elicitation), or server-sent-event streams (server-sse-*: this server
// answers with JSON).
var conformanceScenarios = []string{"server-initialize", "ping", "tools-list", "dns-rebinding-protection"}

func TestConformanceSuite(t *testing.T) {
	b := startHTTP(t, `{}`)
	for _, sc := range conformanceScenarios {
		t.Run(sc, func(t *testing.T) {
			out, stderr, err := runNode(t, nil, nil, conformanceCLI, "server", "--url", b.url, "--scenario", sc, "--output-dir", t.TempDir())
			if err != nil || !strings.Contains(out, " 0 failed") || strings.Contains(out, "FAILURE") {
				t.Fatalf("scenario %s: exit %v\n%s\n%s", sc, err, out, stderr)
			}
		})
	}
}
