package clients

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elicitReport is the JSON report of testdata/clients/ts-elicit.mjs.
type elicitReport struct {
	Transport string `json:"transport"`
	Asked     []struct {
		Mode    string `json:"mode"`
		Message string `json:"message"`
	} `json:"asked"`
	Outcome    string   `json:"outcome"`
	Message    string   `json:"message"`
	ApprovalID string   `json:"approvalId"`
	Problems   []string `json:"problems"`
}

// TestTypeScriptSDKElicitation: the pinned TypeScript SDK client with an
// elicitation handler, against a policy that asks before touch. Over stdio
// (a session that lives across calls) the user is asked in the middle of
// the call, with the exact command and the rule: accept runs it, decline
// and cancel refuse it PERMISSION_DENIED, each answer audited. Over HTTP
// the server is stateless and this SDK (protocol 2025-11-25) declares its
// capabilities only at initialize, which the server never sees on a
// call: the call becomes a pending approval for the operator.
func TestTypeScriptSDKElicitation(t *testing.T) {
	// Skip (or, under CI, fail) here, not in the subtests: the audit
	// counts below need every one of them to have run.
	node(t)
	dir := t.TempDir()
	audit := filepath.Join(dir, "audit.jsonl")
	cfg := `{"audit":{"sink":"file","file":"` + audit + `"},"jobs":{"mode":"process"},
		"policy":{"approvals":{"dir":"` + filepath.Join(dir, "approvals") + `"},
		"rules":[{"id":"ask-touch","action":"ask","reason":"new files need a yes","commands":["touch *"]}]}}`
	run := func(t *testing.T, env []string, answer, marker string) elicitReport {
		t.Helper()
		out, stderr, err := runNode(t, append(env, "ANSWER="+answer, "COMMAND=touch "+marker), nil, "ts-elicit.mjs")
		var rep elicitReport
		if jerr := lastJSON(out, &rep); jerr != nil || err != nil || len(rep.Problems) > 0 {
			t.Fatalf("ts-elicit: %v %v %v\n%s\nstderr: %.2000s", jerr, err, rep.Problems, out, stderr)
		}
		return rep
	}
	cmd, _ := json.Marshal(stdioCommand(t, cfg))
	stdio := []string{"MCP_STDIO=" + string(cmd)}
	for _, tc := range []struct{ answer, outcome string }{
		{"accept", "ok"}, {"decline", "PERMISSION_DENIED"}, {"cancel", "PERMISSION_DENIED"},
	} {
		t.Run("stdio "+tc.answer, func(t *testing.T) {
			marker := filepath.Join(dir, tc.answer)
			rep := run(t, stdio, tc.answer, marker)
			if len(rep.Asked) != 1 || rep.Asked[0].Mode != "form" || !strings.Contains(rep.Asked[0].Message, "touch "+marker) || !strings.Contains(rep.Asked[0].Message, "ask-touch") {
				t.Fatalf("asked %+v, want one form naming the command and the rule", rep.Asked)
			}
			_, statErr := os.Stat(marker)
			if rep.Outcome != tc.outcome || (tc.outcome == "ok") != (statErr == nil) {
				t.Fatalf("outcome %s (%s), marker %v; want %s", rep.Outcome, rep.Message, statErr, tc.outcome)
			}
			if tc.outcome != "ok" && !strings.Contains(rep.Message, "rule ask-touch") {
				t.Fatalf("the refusal names no rule: %s", rep.Message)
			}
		})
	}
	t.Run("http", func(t *testing.T) {
		b := startHTTP(t, cfg)
		marker := filepath.Join(dir, "http")
		rep := run(t, []string{"MCP_URL=" + b.url}, "accept", marker)
		if len(rep.Asked) != 0 || rep.Outcome != "NEEDS_APPROVAL" || rep.ApprovalID == "" {
			t.Fatalf("over stateless HTTP: %+v, want a pending approval", rep)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("ran without approval")
		}
	})
	answers := map[string]int{}
	f, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]string
		if json.Unmarshal(sc.Bytes(), &r) == nil && r["MCP_EVENT"] == "policy.decision" && r["MCP_POLICY_RULE"] == "ask-touch" {
			answers[r["MCP_APPROVAL_VIA"]+":"+r["MCP_APPROVAL"]]++
		}
	}
	want := map[string]int{"elicitation:accepted": 1, "elicitation:declined": 1, "elicitation:cancelled": 1, "approval:pending": 1}
	for k, n := range want {
		if answers[k] != n {
			t.Errorf("audit %s: %d records, want %d (all %v)", k, answers[k], n, answers)
		}
	}
}

// TestTypeScriptSDKApprover: the same client, which declares elicitation
// and accepts every question, over stdio (where it can be asked in the
// middle of the call). A rule with approver user lets it run the command;
// one with approver operator never asks it: the call waits for the
// operator (NEEDS_APPROVAL) and nothing runs.
func TestTypeScriptSDKApprover(t *testing.T) {
	node(t)
	for _, tc := range []struct {
		approver, outcome string
		asked             int
	}{
		{"user", "ok", 1},
		{"operator", "NEEDS_APPROVAL", 0},
	} {
		t.Run(tc.approver, func(t *testing.T) {
			dir := t.TempDir()
			cfg := `{"jobs":{"mode":"process"},"policy":{"approvals":{"dir":"` + filepath.Join(dir, "approvals") + `"},
				"rules":[{"id":"ask-touch","action":"ask","approver":"` + tc.approver + `","reason":"new files need a yes","commands":["touch *"]}]}}`
			cmd, _ := json.Marshal(stdioCommand(t, cfg))
			marker := filepath.Join(dir, "marker")
			out, stderr, err := runNode(t, []string{"MCP_STDIO=" + string(cmd), "ANSWER=accept", "COMMAND=touch " + marker}, nil, "ts-elicit.mjs")
			var rep elicitReport
			if jerr := lastJSON(out, &rep); jerr != nil || err != nil || len(rep.Problems) > 0 {
				t.Fatalf("ts-elicit: %v %v %v\n%s\nstderr: %.2000s", jerr, err, rep.Problems, out, stderr)
			}
			_, statErr := os.Stat(marker)
			if rep.Outcome != tc.outcome || len(rep.Asked) != tc.asked || (tc.outcome == "ok") != (statErr == nil) {
				t.Fatalf("outcome %s (%s), asked %d, marker %v; want %s, asked %d", rep.Outcome, rep.Message, len(rep.Asked), statErr, tc.outcome, tc.asked)
			}
			if tc.outcome == "NEEDS_APPROVAL" && rep.ApprovalID == "" {
				t.Fatalf("NEEDS_APPROVAL without an approval id: %s", rep.Message)
			}
		})
	}
}
