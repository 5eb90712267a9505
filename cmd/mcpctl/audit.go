package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/audit"
)

// auditCall is one tool call as mcpctl audit shows it: its start record
// joined with its end record (absent while it runs, or when the backend
// died during it).
type auditCall struct {
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

// auditSummary is one principal's line of --summary.
type auditSummary struct {
	PrincipalKind string `json:"principalKind"`
	Principal     string `json:"principal"`
	Calls         int64  `json:"calls"`
	Errors        int64  `json:"errors"`
	Refusals      int64  `json:"refusals"`
	Unended       int64  `json:"unended"`
}

// auditQuery is what mcpctl audit asks the journal for.
type auditQuery struct {
	Since, Principal, Conversation, Tool, Outcome, Directory string
	Limit                                                    int
}

// journalArgs are journalctl's arguments for q: the records of calls and
// refusals, with every filter the records carry as a journal match.
// --outcome is applied to end records after the join (start records carry
// no outcome).
func (q auditQuery) journalArgs(now time.Time) ([]string, error) {
	args := []string{"-o", "json", "--no-pager", "-q"}
	if q.Since != "" {
		since := q.Since
		if d, err := time.ParseDuration(q.Since); err == nil {
			if d <= 0 {
				return nil, usageError("--since %s: want a positive duration such as 1h, or a journalctl time", q.Since)
			}
			since = "@" + strconv.FormatInt(now.Add(-d).Unix(), 10)
		}
		args = append(args, "--since", since)
	}
	if q.Directory != "" {
		args = append(args, "--directory", q.Directory)
	}
	args = append(args, audit.FieldMessageID+"="+audit.MsgCallStart, audit.FieldMessageID+"="+audit.MsgCallEnd, audit.FieldMessageID+"="+audit.MsgRefused)
	if q.Principal != "" {
		kind, id, ok := strings.Cut(q.Principal, ":")
		switch {
		case ok && isPrincipalKind(kind):
			args = append(args, audit.FieldPrincipalKind+"="+kind)
			if id != "" {
				args = append(args, audit.FieldPrincipal+"="+id)
			}
		default:
			args = append(args, audit.FieldPrincipal+"="+q.Principal)
		}
	}
	if q.Conversation != "" {
		args = append(args, audit.FieldConversation+"="+q.Conversation)
	}
	if q.Tool != "" {
		args = append(args, audit.FieldTool+"="+q.Tool)
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

// readJournal runs journalctl and decodes its JSON lines. A journal field
// that is not valid UTF-8 comes as an array of bytes; ours never are.
func readJournal(ctx context.Context, args []string) ([]map[string]string, error) {
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
	recs, perr := decodeJournal(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("journalctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return recs, perr
}

func decodeJournal(r io.Reader) ([]map[string]string, error) {
	var out []map[string]string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
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

// joinCalls turns records into calls (oldest first, matching outcome when
// set) and per-principal summaries.
func joinCalls(recs []map[string]string, outcome string) ([]auditCall, []auditSummary) {
	byID := map[string]*auditCall{}
	var order []string
	sums := map[string]*auditSummary{}
	sum := func(kind, id string) *auditSummary {
		k := kind + ":" + id
		if sums[k] == nil {
			sums[k] = &auditSummary{PrincipalKind: kind, Principal: id}
		}
		return sums[k]
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	for _, r := range recs {
		switch r[audit.FieldMessageID] {
		case audit.MsgRefused:
			kind := r[audit.FieldPrincipalKind]
			if kind == "" {
				kind = "unauthenticated"
			}
			sum(kind, r[audit.FieldPrincipal]).Refusals += num(r[audit.FieldCount])
			continue
		case audit.MsgCallStart, audit.MsgCallEnd:
		default:
			continue
		}
		id := r[audit.FieldCallID]
		c := byID[id]
		if c == nil {
			c = &auditCall{CallID: id}
			byID[id] = c
			order = append(order, id)
		}
		c.PrincipalKind, c.Principal, c.Conversation = r[audit.FieldPrincipalKind], r[audit.FieldPrincipal], r[audit.FieldConversation]
		c.Host, c.Role, c.Tool = r[audit.FieldHost], r[audit.FieldRole], r[audit.FieldTool]
		if r[audit.FieldMessageID] == audit.MsgCallStart {
			c.Time = journalTime(r)
			c.QueuedMs = num(r[audit.FieldQueuedMs])
			for _, k := range []string{audit.FieldCommand, audit.FieldPath, audit.FieldUnit, audit.FieldTargetPID} {
				if v := r[k]; v != "" {
					c.Target = v
					if k == audit.FieldTargetPID && r[audit.FieldTargetComm] != "" {
						c.Target += " (" + r[audit.FieldTargetComm] + ")"
					}
					break
				}
			}
			continue
		}
		if c.Time.IsZero() {
			c.Time = journalTime(r)
		}
		c.Ended = true
		c.Outcome, c.DurationMs = r[audit.FieldOutcome], num(r[audit.FieldDurationMs])
		c.ExitCode, c.Signal = r[audit.FieldExitCode], r[audit.FieldExitSignal]
		c.OutputBytes, c.Truncated = num(r[audit.FieldOutputBytes]), r[audit.FieldTruncated] == "true"
	}
	var calls []auditCall
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
	var out []auditSummary
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

// journalTime is a record's time: the journal's __REALTIME_TIMESTAMP
// (microseconds), or the file sink's TIME.
func journalTime(r map[string]string) time.Time {
	if us, err := strconv.ParseInt(r["__REALTIME_TIMESTAMP"], 10, 64); err == nil {
		return time.UnixMicro(us).UTC()
	}
	t, _ := time.Parse(time.RFC3339Nano, r[audit.FieldTime])
	return t.UTC()
}

func renderCalls(w io.Writer, calls []auditCall) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPRINCIPAL\tCONVERSATION\tTOOL\tTARGET\tQUEUED\tOUTCOME\tDURATION\tEXIT")
	for _, c := range calls {
		out := c.Outcome
		if !c.Ended {
			out = "(no end)"
		}
		exit := c.ExitCode
		if c.Signal != "" {
			exit = c.Signal
		}
		if exit == "" {
			exit = "-"
		}
		if c.Truncated {
			out += " (truncated)"
		}
		target := audit.Bound(strings.ReplaceAll(c.Target, "\n", " "), 40)
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%dms\t%s\t%dms\t%s\n", c.Time.Format("2006-01-02 15:04:05.000"),
			principalName(c.PrincipalKind, c.Principal), c.Conversation, c.Tool, target, c.QueuedMs, out, c.DurationMs, exit)
	}
	tw.Flush()
}

// principalName is KIND:ID, or the kind alone when it has no id
// (anonymous, unauthenticated).
func principalName(kind, id string) string {
	if id == "" {
		return kind
	}
	return kind + ":" + id
}

func renderSummary(w io.Writer, sums []auditSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tCALLS\tERRORS\tREFUSALS\tNO END")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", principalName(s.PrincipalKind, s.Principal), s.Calls, s.Errors, s.Refusals, s.Unended)
	}
	tw.Flush()
}

func auditCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "recent tool calls from the journal: who, what, what came of it (journalctl -o json underneath)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Value: "1h", Usage: "window: a duration (`1h`, 30m) or a journalctl time"},
			&cli.StringFlag{Name: "principal", Usage: "only this principal: `ID` or KIND:ID (operator, oauth, asserted, anonymous)"},
			&cli.StringFlag{Name: "conversation", Usage: "only this conversation (the hashed `ID` the records show)"},
			&cli.StringFlag{Name: "tool", Usage: "only this `TOOL`, e.g. shell.exec"},
			&cli.StringFlag{Name: "outcome", Usage: "only calls that ended so: `ok` or an error code (NOT_FOUND, CANCELLED, ...)"},
			&cli.BoolFlag{Name: "summary", Usage: "calls, errors and refusals per principal instead of the calls"},
			&cli.IntFlag{Name: "limit", Value: 100, Usage: "show the last `N` calls (0: all)"},
			&cli.StringFlag{Name: "directory", Usage: "read the journal files in `DIR` (a copy forwarded off the host) instead of the local journal"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError("audit takes no arguments, got %q", c.Args().First())
			}
			if c.Int("limit") < 0 {
				return usageError("--limit %d: want 0 (all) or more", c.Int("limit"))
			}
			q := auditQuery{Since: c.String("since"), Principal: c.String("principal"), Conversation: c.String("conversation"),
				Tool: c.String("tool"), Outcome: c.String("outcome"), Directory: c.String("directory"), Limit: c.Int("limit")}
			args, err := q.journalArgs(time.Now())
			if err != nil {
				return err
			}
			recs, err := readJournal(c.Context, args)
			if err != nil {
				return err
			}
			calls, sums := joinCalls(recs, q.Outcome)
			if c.Bool("summary") {
				d.out.printText(struct {
					Principals []auditSummary `json:"principals"`
				}{sums}, func(w io.Writer) { renderSummary(w, sums) })
				return nil
			}
			if q.Limit > 0 && len(calls) > q.Limit {
				calls = calls[len(calls)-q.Limit:]
			}
			d.out.printText(struct {
				Calls []auditCall `json:"calls"`
			}{calls}, func(w io.Writer) { renderCalls(w, calls) })
			return nil
		},
	}
}
