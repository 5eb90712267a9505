package audit_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/audit"
)

func TestJournalArgs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	base := []string{"MESSAGE_ID=" + audit.MsgCallStart, "MESSAGE_ID=" + audit.MsgCallEnd, "MESSAGE_ID=" + audit.MsgRefused}
	cases := []struct {
		name string
		q    audit.Query
		want []string // besides -o json --no-pager -q and the MESSAGE_IDs
		err  string
	}{
		{"a duration is relative to now", audit.Query{Since: "1h"}, []string{"--since", "@1799996400"}, ""},
		{"a journalctl time passes as it is", audit.Query{Since: "yesterday"}, []string{"--since", "yesterday"}, ""},
		{"a local time is read here", audit.Query{Since: "2026-12-03 10:00"}, []string{"--since", localUnix(t, "2026-12-03 10:00")}, ""},
		{"an RFC 3339 time", audit.Query{Since: "2026-12-03T10:00:00Z"}, []string{"--since", "@1796292000"}, ""},
		{"a known until is applied after the read", audit.Query{Since: "2h", Until: "1h"}, []string{"--since", "@1799992800"}, ""},
		{"an unknown until is journalctl's", audit.Query{Until: "today"}, []string{"--until", "today"}, ""},
		{"negative duration", audit.Query{Since: "-5m"}, nil, "want a positive duration"},
		{"negative until", audit.Query{Until: "-5m"}, nil, "want a positive duration"},
		{"principal id", audit.Query{Principal: "operator"}, []string{"MCP_PRINCIPAL=operator"}, ""},
		{"kind and id", audit.Query{Principal: "oauth:https://auth.example.com alice"}, []string{"MCP_PRINCIPAL_KIND=oauth", "MCP_PRINCIPAL=https://auth.example.com alice"}, ""},
		{"kind only", audit.Query{Principal: "anonymous:"}, []string{"MCP_PRINCIPAL_KIND=anonymous"}, ""},
		{"conversation and tool", audit.Query{Conversation: "c0ffee", Tool: "shell.exec"}, []string{"MCP_CONVERSATION=c0ffee", "MCP_TOOL=shell.exec"}, ""},
		{"a forwarded journal", audit.Query{Directory: "/srv/journal"}, []string{"--directory", "/srv/journal"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.q.JournalArgs(now)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range append(slices.Clone(base), c.want...) {
				if !slices.Contains(got, w) {
					t.Errorf("args %q lack %q", got, w)
				}
			}
			if slices.Contains(got, "--until") != slices.Contains(c.want, "--until") {
				t.Errorf("args %q: --until passed to journalctl only for a time read there", got)
			}
		})
	}
}

func localUnix(t testing.TB, s string) string {
	lt, err := time.ParseInLocation("2006-01-02 15:04", s, time.Local)
	if err != nil {
		t.Fatal(err)
	}
	return "@" + strconv.FormatInt(lt.Unix(), 10)
}

// TestWindowSelect: --since and --until select on the call's own time,
// not on when the journal received its records: a call made during a
// journald stall and delivered after it is in the window of the stall,
// start and end alike, and one delivered in the window but made before
// it is not.
func TestWindowSelect(t *testing.T) {
	at := func(s string) string { return "2026-12-03T10:00:" + s + "Z" }
	recv := func(s string) string {
		tm, _ := time.Parse(time.RFC3339, at(s))
		return strconv.FormatInt(tm.UnixMicro(), 10)
	}
	rec := func(id, msg, call, received string) map[string]string {
		return map[string]string{"MESSAGE_ID": msg, "MCP_CALL_ID": id, audit.FieldCallTime: at(call), "__REALTIME_TIMESTAMP": recv(received)}
	}
	recs := []map[string]string{
		rec("before", audit.MsgCallStart, "05", "12"), // made before, delivered in the window
		rec("before", audit.MsgCallEnd, "05", "12"),
		rec("stalled", audit.MsgCallStart, "11", "40"), // made in it, delivered long after
		rec("stalled", audit.MsgCallEnd, "11", "41"),
		{"MESSAGE_ID": audit.MsgCallStart, "MCP_CALL_ID": "old-build", "__REALTIME_TIMESTAMP": recv("15")},
		{"MESSAGE_ID": audit.MsgRefused, audit.FieldWindowStart: at("19"), audit.FieldCount: "3", "__REALTIME_TIMESTAMP": recv("45")},
		rec("after", audit.MsgCallStart, "30", "30"),
	}
	q := audit.Query{Since: at("10"), Until: at("20")}
	w, err := q.Window(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	calls, sums := audit.JoinCalls(w.Select(recs), "")
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.CallID)
		if c.CallID == "stalled" && (!c.Ended || !c.Time.Equal(time.Date(2026, 12, 3, 10, 0, 11, 0, time.UTC))) {
			t.Errorf("the stalled call: %+v, want ended, at its own time", c)
		}
	}
	if !slices.Equal(ids, []string{"stalled", "old-build"}) {
		t.Errorf("calls %q, want the stalled one and the one without MCP_CALL_TIME received in the window", ids)
	}
	var refusals int64
	for _, s := range sums {
		refusals += s.Refusals
	}
	if refusals != 3 {
		t.Errorf("refusals %d, want the window's 3", refusals)
	}
}

// journalLines is what journalctl -o json gives: a call that ended, one
// still running, and a second's refusals.
const journalLines = `{"__REALTIME_TIMESTAMP": "1796292000000000", "MESSAGE_ID": "fd88676feef14e258a69165b687e1d7a", "MCP_CALL_ID": "c-1", "MCP_TOOL": "shell.exec", "MCP_QUEUED_MS": "2", "MCP_COMMAND": "uptime", "MCP_PRINCIPAL_KIND": "operator", "MCP_PRINCIPAL": "operator", "MCP_CONVERSATION": "default"}
{"__REALTIME_TIMESTAMP": "1796292000052000", "MESSAGE_ID": "9d30f54ec0a74ff8b47e181274285485", "MCP_CALL_ID": "c-1", "MCP_TOOL": "shell.exec", "MCP_OUTCOME": "ok", "MCP_DURATION_MS": "51", "MCP_OUTPUT_BYTES": "812", "MCP_TRUNCATED": "true", "MCP_EXIT_CODE": "0", "MCP_PRINCIPAL_KIND": "operator", "MCP_PRINCIPAL": "operator", "MCP_CONVERSATION": "default"}
{"__REALTIME_TIMESTAMP": "1796292000060000", "MESSAGE_ID": "fd88676feef14e258a69165b687e1d7a", "MCP_CALL_ID": "c-2", "MCP_TOOL": "service.status", "MCP_UNIT": "nginx.service", "MCP_PRINCIPAL_KIND": "oauth", "MCP_PRINCIPAL": "alice", "MCP_CONVERSATION": "c0ffee", "BINARY": [1, 2]}
{"TIME": "2026-12-03T10:00:01Z", "MESSAGE_ID": "` + audit.MsgRefused + `", "MCP_COUNT": "7"}
`

func TestJoinCalls(t *testing.T) {
	recs, err := audit.DecodeJournal(strings.NewReader(journalLines))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs[2]["BINARY"]; ok {
		t.Errorf("a byte-array field was kept: %q", recs[2])
	}
	cases := []struct {
		name, outcome string
		want          []audit.Call
	}{
		{"every call, oldest first", "", []audit.Call{
			{Time: time.UnixMicro(1796292000000000).UTC(), CallID: "c-1", PrincipalKind: "operator", Principal: "operator", Conversation: "default", Tool: "shell.exec",
				Target: "uptime", QueuedMs: 2, Outcome: "ok", DurationMs: 51, ExitCode: "0", OutputBytes: 812, Truncated: true, Ended: true},
			{Time: time.UnixMicro(1796292000060000).UTC(), CallID: "c-2", PrincipalKind: "oauth", Principal: "alice", Conversation: "c0ffee", Tool: "service.status",
				Target: "nginx.service"},
		}},
		{"only an outcome", "ok", []audit.Call{
			{Time: time.UnixMicro(1796292000000000).UTC(), CallID: "c-1", PrincipalKind: "operator", Principal: "operator", Conversation: "default", Tool: "shell.exec",
				Target: "uptime", QueuedMs: 2, Outcome: "ok", DurationMs: 51, ExitCode: "0", OutputBytes: 812, Truncated: true, Ended: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, _ := audit.JoinCalls(recs, c.outcome)
			if !slices.Equal(calls, c.want) {
				t.Errorf("calls:\n got %+v\nwant %+v", calls, c.want)
			}
		})
	}
	_, sums := audit.JoinCalls(recs, "")
	want := []audit.Summary{
		{PrincipalKind: "oauth", Principal: "alice", Calls: 1, Unended: 1},
		{PrincipalKind: "operator", Principal: "operator", Calls: 1},
		{PrincipalKind: "unauthenticated", Refusals: 7},
	}
	if !slices.Equal(sums, want) {
		t.Errorf("summaries:\n got %+v\nwant %+v", sums, want)
	}
}

func TestJournalTime(t *testing.T) {
	cases := []struct {
		name string
		rec  map[string]string
		want time.Time
	}{
		{"the journal's microseconds", map[string]string{"__REALTIME_TIMESTAMP": "1796292000000001"}, time.UnixMicro(1796292000000001).UTC()},
		{"the file sink's TIME", map[string]string{audit.FieldTime: "2026-12-03T10:00:01.5+01:00"}, time.Date(2026, 12, 3, 9, 0, 1, 5e8, time.UTC)},
		{"its own TIME before the journal's", map[string]string{audit.FieldTime: "2026-12-03T09:00:01Z", "__REALTIME_TIMESTAMP": "1796292000000001"}, time.Date(2026, 12, 3, 9, 0, 1, 0, time.UTC)},
		{"neither", map[string]string{}, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := audit.JournalTime(c.rec); !got.Equal(c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestDecodeJournalSkipsBlankLines(t *testing.T) {
	recs, err := audit.DecodeJournal(strings.NewReader("\n" + strings.ReplaceAll(journalLines, "\n", "\n\n")))
	if err != nil || len(recs) != 4 {
		t.Fatalf("%d records, %v; want the 4 records", len(recs), err)
	}
}
