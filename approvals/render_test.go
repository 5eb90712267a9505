package approvals

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/mcpwire"
)

// TestAge: a duration in its largest unit, days only from two of them.
func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {59 * time.Second, "59s"}, {time.Minute, "1m"}, {59 * time.Minute, "59m"},
		{time.Hour, "1h"}, {47 * time.Hour, "47h"}, {48 * time.Hour, "2d"}, {131 * 24 * time.Hour, "131d"},
	} {
		if got := Age(tc.d); got != tc.want {
			t.Errorf("Age(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestRenderLines: the listing fits its width (a cut says so), a live grant
// is listed as granted with what ends it, a decision and a watch event
// name what to run next, and control characters never reach the terminal.
func TestRenderLines(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	long := strings.Repeat("echo word ", 20)
	r := Record{Approval: mcpwire.Approval{ID: "a0000000000000001", Status: mcpwire.ApprovalPending, Tool: mcpwire.ToolShellExec, Rule: "ask",
		PrincipalKind: "asserted", Principal: "alice\x1b[31m", Arguments: json.RawMessage(`{"command":"` + long + `"}`),
		CreatedAt: now.Add(-3 * time.Hour), ExpiresAt: now.Add(time.Hour)}}
	granted := r
	granted.ID, granted.Grant = "a0000000000000002", &GrantInfo{Until: now.Add(2 * time.Hour), Live: true}

	var list bytes.Buffer
	RenderList(&list, []Record{r, granted}, now, 80)
	for _, l := range strings.Split(strings.TrimSuffix(list.String(), "\n"), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	var decided bytes.Buffer
	RenderDecision(&decided, granted, true)
	RenderDecision(&decided, r, false)
	watch := WatchLine(Event{At: now, Event: EventPending, Record: r})
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"list", list.String(), []string{"ID                 STATUS", "3h  shell.exec", "granted", "until 2026-12-06T06:00:00Z (2h left; …[+43 bytes]"}},
		{"decision", decided.String(), []string{"granted a0000000000000002", "(mcpctl approvals revoke a0000000000000002 ends it)", "denied a0000000000000001: shell.exec will be refused"}},
		{"watch", watch, []string{"pending", "mcpctl approvals approve a0000000000000001 (or deny, show)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !strings.Contains(tc.out, w) {
					t.Errorf("lacks %q:\n%s", w, tc.out)
				}
			}
			if strings.Contains(tc.out, "\x1b") {
				t.Errorf("a control character reaches the terminal:\n%q", tc.out)
			}
		})
	}
}
