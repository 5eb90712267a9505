package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overdeck/mcp-backend/approvals"
	"github.com/overdeck/mcp-backend/ops/ctlconfig"
	"github.com/overdeck/mcp-backend/ops/deploy"
	"github.com/overdeck/mcp-backend/units"
)

// defaultApprovalsDir is where the production backend keeps them when
// policy.approvals.dir is empty: approvals/ in its unit's StateDirectory,
// named for backend.unit (/var/lib/mcp-backend/approvals by default).
func defaultApprovalsDir(backendUnit string) string {
	return filepath.Join("/var/lib", units.StateDirectory(backendUnit), "approvals")
}

func approvalsCommand(d *deps) *cli.Command {
	dirFlag := func() cli.Flag {
		return &cli.StringFlag{Name: "dir", Usage: "the backend's approvals `DIR` (policy.approvals.dir; default: approvals/ in backend.unit's StateDirectory, " +
			defaultApprovalsDir(ctlconfig.Default().Backend.Unit) + " for the stock unit)"}
	}
	decide := func(approve bool) func(c *cli.Context) error {
		return func(c *cli.Context) error { return approvalsDecide(c, d, approve) }
	}
	return &cli.Command{
		Name:  "approvals",
		Usage: "list and decide the calls the backend's policy holds for the operator's approval",
		Description: "A call the policy asks about, from a client that cannot ask its user, waits as a\n" +
			"pending approval. Approve it and the same call, sent again, runs once (a command\n" +
			"as a job); deny it and it is refused. An approval is for exactly that call\n" +
			"(principal, tool, arguments) and expires (policy.approvals.expireMs).",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list approvals, oldest first", Flags: []cli.Flag{dirFlag(),
				&cli.BoolFlag{Name: "all", Usage: "also decided and expired ones (default: pending ones and live grants)"},
				&cli.BoolFlag{Name: "wide", Usage: "every call whole, every part judged (default: each line cut to 80 columns, visibly)"}},
				Action: func(c *cli.Context) error { return approvalsList(c, d) }},
			{Name: "show", Usage: "show one approval: the whole call (command, env, cwd, every argument), each part judged and the rule", ArgsUsage: "ID", Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error { return approvalsShow(c, d) }},
			{Name: "approve", Usage: "approve a pending approval: the call runs once when sent again (--for: every time, until the grant ends)", ArgsUsage: "ID", Flags: []cli.Flag{dirFlag(),
				&cli.DurationFlag{Name: "for", Usage: "a grant: the same principal's same call (tool and exact arguments) runs without asking for `DURATION` (at most 24h)"}},
				Action: decide(true)},
			{Name: "watch", Usage: "follow the approvals as they happen (like journalctl -f): each new pending approval, decision, expiry and run; --json: one object a line; ends on SIGINT/SIGTERM",
				Flags: []cli.Flag{dirFlag(),
					&cli.DurationFlag{Name: "interval", Value: 500 * time.Millisecond, Usage: "how often the store is read (`DURATION`)"}},
				Action: func(c *cli.Context) error { return approvalsWatch(c, d) }},
			{Name: "notify", Hidden: true, Usage: "run approvals.notify once for each pending approval not notified yet (mcp-approvals-notify.service runs it)",
				Flags:  []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error { return approvalsNotify(c, d) }},
			{Name: "revoke", Usage: "end a live grant now: its call asks again", ArgsUsage: "ID", Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error { return approvalsRevoke(c, d) }},
			{Name: "deny", Usage: "deny a pending approval: the call is refused", ArgsUsage: "ID", Flags: []cli.Flag{dirFlag()},
				Action: decide(false)},
		},
	}
}

func openApprovalStore(c *cli.Context) (*approvals.Store, error) {
	dir := c.String("dir")
	if dir == "" {
		cfg, _, err := loadCtlConfig(c)
		if err != nil {
			return nil, err
		}
		dir = cfg.ApprovalsDir()
	}
	st, err := approvals.Open(dir, nil)
	if err != nil {
		return nil, withCode(deploy.CodeFailed, err)
	}
	return st, nil
}

func approvalID(c *cli.Context, verb string) (string, error) {
	if c.Args().Len() != 1 {
		return "", usageError("approvals %s: want one approval ID (see mcpctl approvals list)", verb)
	}
	id := c.Args().First()
	if !approvals.ValidID(id) {
		return "", usageError("approvals %s: %q is not an approval ID (a and 16 hex digits, as mcpctl approvals list shows)", verb, id)
	}
	return id, nil
}

func approvalsList(c *cli.Context, d *deps) error {
	if c.Args().Present() {
		return usageError("approvals list: unexpected argument %q", c.Args().First())
	}
	st, err := openApprovalStore(c)
	if err != nil {
		return err
	}
	all, err := st.List()
	if err != nil {
		return withCode(deploy.CodeFailed, err)
	}
	shown := []approvals.Record{}
	for _, r := range all {
		if c.Bool("all") || r.Status == "pending" || r.Grant != nil && r.Grant.Live {
			shown = append(shown, r)
		}
	}
	d.out.printText(struct {
		Approvals []approvals.Record `json:"approvals"`
	}{shown}, func(w io.Writer) { approvals.RenderList(w, shown, time.Now(), d.out.Width()) })
	return nil
}

func approvalsShow(c *cli.Context, d *deps) error {
	id, err := approvalID(c, "show")
	if err != nil {
		return err
	}
	st, err := openApprovalStore(c)
	if err != nil {
		return err
	}
	r, err := st.Get(id)
	if err != nil {
		return withCode(deploy.CodeFailed, fmt.Errorf("%w (see mcpctl approvals list --all)", err))
	}
	d.out.printText(r, func(w io.Writer) { approvals.Render(w, r) })
	return nil
}

func approvalsDecide(c *cli.Context, d *deps, approve bool) error {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	id, err := approvalID(c, verb)
	if err != nil {
		return err
	}
	st, err := openApprovalStore(c)
	if err != nil {
		return err
	}
	grant := c.Duration("for")
	if c.IsSet("for") && (!approve || grant <= 0 || grant > approvals.MaxGrant) {
		return usageError("approvals %s: --for %s: a grant lasts more than 0 and at most %s", verb, grant, approvals.MaxGrant)
	}
	var r approvals.Record
	if grant > 0 {
		r, err = st.Grant(id, grant, "operator")
	} else {
		r, err = st.Decide(id, approve, "operator")
	}
	switch {
	case errors.Is(err, approvals.ErrNotFound), errors.Is(err, approvals.ErrExpired), errors.Is(err, approvals.ErrDecided):
		return withCode(deploy.CodeFailed, fmt.Errorf("approvals %s: %w; nothing changed (see mcpctl approvals show %s)", verb, err, id))
	case err != nil:
		return withCode(deploy.CodeFailed, err)
	}
	d.out.printText(r, func(w io.Writer) { approvals.RenderDecision(w, r, approve) })
	return nil
}

func approvalsRevoke(c *cli.Context, d *deps) error {
	id, err := approvalID(c, "revoke")
	if err != nil {
		return err
	}
	st, err := openApprovalStore(c)
	if err != nil {
		return err
	}
	r, err := st.Revoke(id, "operator")
	switch {
	case errors.Is(err, approvals.ErrNotFound), errors.Is(err, approvals.ErrNotGrant):
		return withCode(deploy.CodeFailed, fmt.Errorf("approvals revoke: %w; nothing changed (see mcpctl approvals show %s)", err, id))
	case err != nil:
		return withCode(deploy.CodeFailed, err)
	}
	d.out.printText(r, func(w io.Writer) {
		fmt.Fprintf(w, "revoked %s: %s asks again\n", r.ID, r.Tool)
	})
	return nil
}

// approvalsWatch follows the store by reading it every --interval: a
// directory read and a few small files, which works on any filesystem and
// beside any number of backends, and misses no state (a change between
// two reads is reported at the second). It prints the pending approvals
// and live grants there are, then each change, until the context ends
// (SIGINT, SIGTERM: exit 0).
func approvalsWatch(c *cli.Context, d *deps) error {
	if c.Args().Present() {
		return usageError("approvals watch: unexpected argument %q", c.Args().First())
	}
	every := c.Duration("interval")
	if every < 10*time.Millisecond || every > time.Minute {
		return usageError("approvals watch: --interval %s: must be 10ms..1m", every)
	}
	st, err := openApprovalStore(c)
	if err != nil {
		return err
	}
	w := d.out.w
	if !d.out.json {
		fmt.Fprintf(w, "watching %s (Ctrl-C ends)\n", st.Dir())
	}
	seen := approvals.Seen{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for initial := true; ; initial = false {
		list, err := st.List()
		if err != nil {
			return withCode(deploy.CodeFailed, err)
		}
		for _, ev := range approvals.Changes(seen, list, time.Now(), initial) {
			if d.out.json {
				b, _ := json.Marshal(ev)
				fmt.Fprintf(w, "%s\n", b)
			} else {
				fmt.Fprintln(w, approvals.WatchLine(ev))
			}
		}
		if f, ok := w.(interface{ Sync() error }); ok {
			_ = f.Sync()
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-tick.C:
		}
	}
}
