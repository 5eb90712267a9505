package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Call is one tool call as the journal tells it: its start record joined
// with its end record (absent while it runs, or when the backend died
// during it).
type Call struct {
	Time          time.Time `json:"time"`
	CallID        string    `json:"callId"`
	PrincipalKind string    `json:"principalKind"`
	Principal     string    `json:"principal"`
	Conversation  string    `json:"conversation"`
	Host          string    `json:"host,omitempty"`
	Role          string    `json:"role,omitempty"`
	Tool          string    `json:"tool"`
	Target        string    `json:"target,omitempty"` // command, path, unit or pid
	QueuedMs      int64     `json:"queuedMs"`
	Outcome       string    `json:"outcome"` // "" while no end record
	DurationMs    int64     `json:"durationMs"`
	ExitCode      string    `json:"exitCode,omitempty"`
	Signal        string    `json:"signal,omitempty"`
	OutputBytes   int64     `json:"outputBytes"`
	Truncated     bool      `json:"truncated"`
	Ended         bool      `json:"ended"`
}

// Summary is one principal's calls, errors and refusals.
type Summary struct {
	PrincipalKind string `json:"principalKind"`
	Principal     string `json:"principal"`
	Calls         int64  `json:"calls"`
	Errors        int64  `json:"errors"`
	Refusals      int64  `json:"refusals"`
	Unended       int64  `json:"unended"`
}

// Query is what to ask the journal for. Since and Until are each a
// duration back from now (1h), an RFC 3339 time, YYYY-MM-DD[ HH:MM[:SS]]
// (local time) or @UNIX-SECONDS, and then select on the records' own
// time (a call's MCP_CALL_TIME); any other journalctl time is passed to
// journalctl, which selects on when the journal received the records.
type Query struct {
	Since, Until, Principal, Conversation, Tool, Outcome, Directory string
	Limit                                                           int
}

// ErrSinceNotPositive is JournalArgs' answer to a Since or Until duration
// that is zero or negative: a window reaching into the future is a mistake.
var ErrSinceNotPositive = errors.New("want a positive duration such as 1h, or a journalctl time")

// timeLayouts are the absolute times ParseTime reads, besides RFC 3339.
var timeLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// ParseTime reads a Since or Until value as a time: ok is false for a
// value it does not know (a journalctl time such as "yesterday").
func ParseTime(s string, now time.Time) (t time.Time, ok bool, err error) {
	if d, derr := time.ParseDuration(s); derr == nil {
		if d <= 0 {
			return t, false, ErrSinceNotPositive
		}
		return now.Add(-d), true, nil
	}
	if sec, found := strings.CutPrefix(s, "@"); found {
		if n, perr := strconv.ParseInt(sec, 10, 64); perr == nil {
			return time.Unix(n, 0), true, nil
		}
	}
	if t, perr := time.Parse(time.RFC3339Nano, s); perr == nil {
		return t, true, nil
	}
	for _, l := range timeLayouts {
		if t, perr := time.ParseInLocation(l, s, time.Local); perr == nil {
			return t, true, nil
		}
	}
	return t, false, nil
}

// Window is the part of a Query that selects on the records' own time:
// zero bounds select nothing.
type Window struct{ Since, Until time.Time }

// Window reads Since and Until as times (see ParseTime).
func (q Query) Window(now time.Time) (Window, error) {
	var w Window
	var err error
	if q.Since != "" {
		if w.Since, _, err = ParseTime(q.Since, now); err != nil {
			return w, err
		}
	}
	if q.Until != "" {
		if w.Until, _, err = ParseTime(q.Until, now); err != nil {
			return w, err
		}
	}
	return w, nil
}

// Select keeps the records whose own time (RecordTime) is within w. A
// call's records all carry its start, so a call is kept or left whole.
func (w Window) Select(recs []map[string]string) []map[string]string {
	if w.Since.IsZero() && w.Until.IsZero() {
		return recs
	}
	var out []map[string]string
	for _, r := range recs {
		t := RecordTime(r)
		if (!w.Since.IsZero() && t.Before(w.Since)) || (!w.Until.IsZero() && t.After(w.Until)) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// JournalArgs are journalctl's arguments for q: the records of calls and
// refusals, with every filter the records carry as a journal match.
// Outcome is applied to end records after the join (start records carry
// no outcome).
func (q Query) JournalArgs(now time.Time) ([]string, error) {
	args := []string{"-o", "json", "--no-pager", "-q"}
	// A record reaches the journal at its own time or later: a lower
	// bound on the journal's time is safe, an upper one would lose the
	// records a stalled journald received late, so a known Until is
	// applied after (Window.Select) and only an unknown one here.
	if q.Since != "" {
		since := q.Since
		t, ok, err := ParseTime(q.Since, now)
		if err != nil {
			return nil, err
		}
		if ok {
			since = "@" + strconv.FormatInt(t.Unix(), 10)
		}
		args = append(args, "--since", since)
	}
	if q.Until != "" {
		_, ok, err := ParseTime(q.Until, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			args = append(args, "--until", q.Until)
		}
	}
	if q.Directory != "" {
		args = append(args, "--directory", q.Directory)
	}
	args = append(args, FieldMessageID+"="+MsgCallStart, FieldMessageID+"="+MsgCallEnd, FieldMessageID+"="+MsgRefused)
	if q.Principal != "" {
		kind, id, ok := strings.Cut(q.Principal, ":")
		switch {
		case ok && isPrincipalKind(kind):
			args = append(args, FieldPrincipalKind+"="+kind)
			if id != "" {
				args = append(args, FieldPrincipal+"="+id)
			}
		default:
			args = append(args, FieldPrincipal+"="+q.Principal)
		}
	}
	if q.Conversation != "" {
		args = append(args, FieldConversation+"="+q.Conversation)
	}
	if q.Tool != "" {
		args = append(args, FieldTool+"="+q.Tool)
	}
	return args, nil
}

func isPrincipalKind(k string) bool {
	switch k {
	case "operator", "oauth", "asserted", "anonymous":
		return true
	}
	return false
}

// ReadJournal runs journalctl and decodes its JSON lines. A journal field
// that is not valid UTF-8 comes as an array of bytes; ours never are.
func ReadJournal(ctx context.Context, args []string) ([]map[string]string, error) {
	cmd := exec.CommandContext(ctx, "journalctl", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	recs, perr := DecodeJournal(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("journalctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return recs, perr
}

// DecodeJournal decodes journalctl -o json lines, keeping the string
// fields.
func DecodeJournal(r io.Reader) ([]map[string]string, error) {
	var out []map[string]string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			return out, fmt.Errorf("journalctl output: %w", err)
		}
		m := make(map[string]string, len(raw))
		for k, v := range raw {
			if s, ok := v.(string); ok {
				m[k] = s
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// JoinCalls turns records into calls (oldest first, matching outcome when
// set) and per-principal summaries.
func JoinCalls(recs []map[string]string, outcome string) ([]Call, []Summary) {
	byID := map[string]*Call{}
	var order []string
	sums := map[string]*Summary{}
	sum := func(kind, id string) *Summary {
		k := kind + ":" + id
		if sums[k] == nil {
			sums[k] = &Summary{PrincipalKind: kind, Principal: id}
		}
		return sums[k]
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	for _, r := range recs {
		switch r[FieldMessageID] {
		case MsgRefused:
			kind := r[FieldPrincipalKind]
			if kind == "" {
				kind = "unauthenticated"
			}
			sum(kind, r[FieldPrincipal]).Refusals += num(r[FieldCount])
			continue
		case MsgCallStart, MsgCallEnd:
		default:
			continue
		}
		id := r[FieldCallID]
		c := byID[id]
		if c == nil {
			c = &Call{CallID: id}
			byID[id] = c
			order = append(order, id)
		}
		c.PrincipalKind, c.Principal, c.Conversation = r[FieldPrincipalKind], r[FieldPrincipal], r[FieldConversation]
		c.Host, c.Role, c.Tool = r[FieldHost], r[FieldRole], r[FieldTool]
		if r[FieldMessageID] == MsgCallStart {
			c.Time = RecordTime(r)
			c.QueuedMs = num(r[FieldQueuedMs])
			for _, k := range []string{FieldCommand, FieldPath, FieldUnit, FieldTargetPID} {
				if v := r[k]; v != "" {
					c.Target = v
					if k == FieldTargetPID && r[FieldTargetComm] != "" {
						c.Target += " (" + r[FieldTargetComm] + ")"
					}
					break
				}
			}
			continue
		}
		if c.Time.IsZero() {
			c.Time = RecordTime(r)
		}
		c.Ended = true
		c.Outcome, c.DurationMs = r[FieldOutcome], num(r[FieldDurationMs])
		c.ExitCode, c.Signal = r[FieldExitCode], r[FieldExitSignal]
		c.OutputBytes, c.Truncated = num(r[FieldOutputBytes]), r[FieldTruncated] == "true"
	}
	var calls []Call
	for _, id := range order {
		c := byID[id]
		if outcome != "" && c.Outcome != outcome {
			continue
		}
		calls = append(calls, *c)
		s := sum(c.PrincipalKind, c.Principal)
		s.Calls++
		switch {
		case !c.Ended:
			s.Unended++
		case c.Outcome != "ok":
			s.Errors++
		}
	}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Time.Before(calls[j].Time) })
	var out []Summary
	for _, s := range sums {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PrincipalKind != out[j].PrincipalKind {
			return out[i].PrincipalKind < out[j].PrincipalKind
		}
		return out[i].Principal < out[j].Principal
	})
	return calls, out
}

// JournalTime is a record's time: its own TIME, or (a record of a build
// that wrote none to the journal) the journal's __REALTIME_TIMESTAMP
// (microseconds), when the journal received it.
func JournalTime(r map[string]string) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, r[FieldTime]); err == nil {
		return t.UTC()
	}
	if us, err := strconv.ParseInt(r["__REALTIME_TIMESTAMP"], 10, 64); err == nil {
		return time.UnixMicro(us).UTC()
	}
	return time.Time{}
}

// RecordTime is the time a record tells of: a call's start
// (MCP_CALL_TIME), a refusal window's start, else JournalTime.
func RecordTime(r map[string]string) time.Time {
	for _, f := range []string{FieldCallTime, FieldWindowStart} {
		if t, err := time.Parse(time.RFC3339Nano, r[f]); err == nil {
			return t.UTC()
		}
	}
	return JournalTime(r)
}
