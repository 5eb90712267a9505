package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/audit"
)

func renderCalls(w io.Writer, calls []audit.Call) {
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

func renderSummary(w io.Writer, sums []audit.Summary) {
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
			&cli.StringFlag{Name: "since", Value: "1h", Usage: "calls that started since: a duration back from now (`1h`, 30m), an RFC 3339 time, YYYY-MM-DD[ HH:MM[:SS]] or @UNIX-SECONDS (on the call's own time), or another journalctl time (on when the journal received the records)"},
			&cli.StringFlag{Name: "until", Usage: "calls that started until `TIME`: the forms --since takes"},
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
			q := audit.Query{Since: c.String("since"), Until: c.String("until"), Principal: c.String("principal"), Conversation: c.String("conversation"),
				Tool: c.String("tool"), Outcome: c.String("outcome"), Directory: c.String("directory"), Limit: c.Int("limit")}
			now := time.Now()
			args, err := q.JournalArgs(now)
			if errors.Is(err, audit.ErrSinceNotPositive) {
				return usageError("--since %s --until %s: %v", q.Since, q.Until, err)
			} else if err != nil {
				return err
			}
			w, err := q.Window(now)
			if err != nil {
				return usageError("--since %s --until %s: %v", q.Since, q.Until, err)
			}
			recs, err := audit.ReadJournal(c.Context, args)
			if err != nil {
				return err
			}
			calls, sums := audit.JoinCalls(w.Select(recs), q.Outcome)
			if c.Bool("summary") {
				d.out.printText(struct {
					Principals []audit.Summary `json:"principals"`
				}{sums}, func(w io.Writer) { renderSummary(w, sums) })
				return nil
			}
			if q.Limit > 0 && len(calls) > q.Limit {
				calls = calls[len(calls)-q.Limit:]
			}
			d.out.printText(struct {
				Calls []audit.Call `json:"calls"`
			}{calls}, func(w io.Writer) { renderCalls(w, calls) })
			return nil
		},
	}
}
