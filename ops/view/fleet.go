package view

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// Fleet is the live output of a fleet run: one line per step as it
// ends and the per-host table after each wave, or with --json one event
// per line as it is logged; and the fleet's plan and status.
type Fleet struct {
	w    io.Writer
	json bool
	out  *Printer
	inv  *fleet.Inventory
	mu   sync.Mutex
	rows map[string]*fleetRow
	to   string
	// shown: the table printed last is still current.
	shown bool
}

// fleetRow is one host's line of the table.
type fleetRow struct {
	Host, Wave, From                      string
	Canary, Stress, Cutover, Verify, Note string
	Result                                fleet.Outcome
	start, end                            time.Time
}

// NewFleet writes to w (JSON lines with asJSON) for the hosts of inv.
func NewFleet(w io.Writer, asJSON bool, out *Printer, inv *fleet.Inventory) *Fleet {
	v := &Fleet{w: w, json: asJSON, out: out, inv: inv, rows: map[string]*fleetRow{}}
	for _, h := range inv.Hosts {
		v.rows[h.Name] = &fleetRow{Host: h.Name}
	}
	return v
}

// SetPlan fills the table from the plan a run starts with.
func (v *Fleet) SetPlan(p *fleet.Plan) {
	v.to = p.Version
	for _, h := range p.Hosts {
		r := v.rows[h.Host]
		r.Wave, r.From = fmt.Sprint(h.Wave), h.From
	}
}

// SetRun fills the table from the run a resume or rollback continues.
func (v *Fleet) SetRun(rs *fleet.RunState) {
	v.to = rs.Start.Version
	for name, h := range rs.Hosts {
		if r := v.rows[name]; r != nil {
			r.Wave, r.Result = fmt.Sprint(h.Wave), h.Outcome
			r.From = h.From
		}
	}
}

// Event is Runner.Emit: called from the hosts' goroutines.
func (v *Fleet) Event(e fleet.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.json {
		b, _ := json.Marshal(e)
		fmt.Fprintf(v.w, "%s\n", b)
		return
	}
	st := v.out.St
	r := v.rows[e.Host]
	if e.Host != "" {
		v.shown = false
	}
	if r != nil && r.start.IsZero() && e.Type == fleet.EvStepStart {
		r.start = e.Time
	}
	if r != nil && e.From != "" {
		r.From = e.From
	}
	mark := func(ok bool, s string) string {
		if ok {
			return st.OK.Render(s)
		}
		return st.Bad.Render(s)
	}
	switch e.Type {
	case fleet.EvWaveStart:
		fmt.Fprintf(v.w, "%s %d: %s\n", st.Title.Render("wave"), e.Wave, strings.ReplaceAll(e.Detail, ",", ", "))
	case fleet.EvStepEnd:
		ok := e.ExitCode != nil && *e.ExitCode == 0
		res, line := "ok", "ok"
		switch {
		case e.ExitCode == nil:
			res, line = "no outcome", "no outcome: "+e.Detail
		case !ok:
			res = fmt.Sprintf("exit %d", *e.ExitCode)
			line = res
		}
		if r != nil {
			switch e.Step {
			case "canary":
				r.Canary = res
			case "stress":
				r.Stress = res
			case "cutover":
				r.Cutover = res
				if e.ExitCode != nil && *e.ExitCode == outcome.RolledBack {
					r.Cutover = "rolled back"
				}
			}
		}
		took := ""
		if !e.HostStart.IsZero() {
			took = " " + st.Dim.Render(e.HostEnd.Sub(e.HostStart).Round(10*time.Millisecond).String())
		}
		fmt.Fprintf(v.w, "  %-12s %-14s %s%s\n", e.Host, e.Step, mark(ok, line), took)
	case fleet.EvHostEnd:
		if r != nil {
			r.Result, r.end, r.Note = e.Outcome, e.Time, e.Detail
			r.Verify = map[bool]string{true: "PASS", false: "FAIL"}[e.Outcome.OK()]
			if e.From != "" {
				r.From = e.From
			}
		}
		fmt.Fprintf(v.w, "  %-12s %s %s\n", e.Host, mark(e.Outcome.OK(), string(e.Outcome)), st.Dim.Render(e.Detail))
	case fleet.EvWaveEnd:
		fmt.Fprintf(v.w, "wave %d: %s, %s\n%s\n", e.Wave, e.Decision, e.Detail, v.table())
		v.shown = true
	case fleet.EvRevertStart:
		fmt.Fprintf(v.w, "%s %s\n", st.Bad.Render("revert:"), e.Detail)
	case fleet.EvRevertHost:
		if r != nil {
			r.Result = e.Outcome
		}
		fmt.Fprintf(v.w, "  %-12s %s %s\n", e.Host, mark(e.Outcome == fleet.Reverted, string(e.Outcome)), st.Dim.Render(e.Detail))
	}
}

// Final ends the output with the run's result.
func (v *Fleet) Final(res *fleet.Result) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.json {
		b, _ := json.Marshal(struct {
			Type string `json:"type"`
			*fleet.Result
		}{"result", res})
		fmt.Fprintf(v.w, "%s\n", b)
		return
	}
	if !v.shown {
		fmt.Fprintln(v.w, v.table())
	}
	fmt.Fprintf(v.w, "run %s: %s (exit %d)\n", res.Run, res.Message, res.Code)
	for _, c := range res.Commands {
		fmt.Fprintf(v.w, "  %s\n", c)
	}
}

// table is the per-host table; the caller holds mu.
func (v *Fleet) table() string {
	rows := [][]string{}
	for _, h := range v.inv.Hosts {
		r := v.rows[h.Name]
		took := ""
		if !r.start.IsZero() && !r.end.IsZero() {
			took = r.end.Sub(r.start).Round(100 * time.Millisecond).String()
		}
		from := r.From
		if from == "" {
			from = "?"
		}
		res := string(r.Result)
		if res == "" {
			res = "-"
		}
		rows = append(rows, []string{r.Host, r.Wave, from + " -> " + v.to, r.Canary, r.Stress, r.Cutover, r.Verify, took, v.outcome(r.Result, res)})
	}
	return v.out.Table([]string{"host", "wave", "from -> to", "canary", "stress", "cutover", "verify", "time", "result"}, rows)
}

func (v *Fleet) outcome(o fleet.Outcome, s string) string {
	switch {
	case o.OK():
		return v.out.St.OK.Render(s)
	case o == "":
		return v.out.St.Dim.Render(s)
	}
	return v.out.St.Bad.Render(s)
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// RenderPlan writes the plan: the build, the waves, what each host gets.
func (v *Fleet) RenderPlan(w io.Writer, st Styles, p *fleet.Plan) {
	if p.Digest != "" {
		fmt.Fprintf(w, "%s %s (%s)\n", st.Title.Render("build"), p.Version, shortDigest(p.Digest))
	}
	for _, wv := range p.Waves {
		fmt.Fprintf(w, "%s %d: %s\n", st.Title.Render("wave"), wv.Index, strings.Join(wv.Hosts, ", "))
	}
	rows := [][]string{}
	for _, h := range p.Hosts {
		what := "roll out"
		switch {
		case h.Problem != "":
			what = st.Bad.Render(h.Problem)
		case h.Skip:
			what = st.OK.Render("skip: already on it, verified")
		case p.Digest == "":
			what = st.OK.Render("ready")
		}
		rows = append(rows, []string{h.Host, fmt.Sprint(h.Wave), dash(h.From), shortDigest(h.Digest), what})
	}
	fmt.Fprintln(w, v.out.Table([]string{"host", "wave", "version", "digest", "plan"}, rows))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RenderStatus writes the fleet at a glance and its last run.
func (v *Fleet) RenderStatus(w io.Writer, st Styles, rep *fleet.Status) {
	rows := [][]string{}
	for _, h := range rep.Hosts {
		f := h.Facts
		if f == nil {
			rows = append(rows, []string{h.Host, h.Address, "-", "-", st.Bad.Render("unreachable"), "-", "-", "-", st.Bad.Render(h.Error)})
			continue
		}
		health := st.OK.Render("healthy")
		if !f.Healthy {
			health = st.Bad.Render("unhealthy")
		}
		pending := "-"
		if f.Pending != nil {
			pending = st.Bad.Render("to " + f.Pending.ToVersion + " until " + f.Pending.Deadline.Local().Format("15:04:05"))
		}
		up := 0
		for _, t := range f.Tunnels {
			if t.ActiveState == "active" {
				up++
			}
		}
		tun := fmt.Sprintf("%d/%d active", up, len(f.Tunnels))
		if up < len(f.Tunnels) {
			tun = st.Bad.Render(tun)
		}
		rows = append(rows, []string{h.Host, h.Address, dash(f.Version), shortDigest(f.Digest), health, pending, tun, shortDigest(f.MachineID), dash(string(h.LastRun))})
	}
	fmt.Fprintln(w, v.out.Table([]string{"host", "address", "version", "digest", "health", "pending", "tunnels", "machine", "last run"}, rows))
	if rs := rep.LastRun; rs != nil {
		end := "not ended (resume it: mcpctl fleet resume)"
		if rs.End != nil {
			end = fmt.Sprintf("exit %d: %s", rs.Code(), rs.End.Detail)
		}
		fmt.Fprintf(w, "last run %s: %s (%s) started %s, %s\n", rs.Start.Run, rs.Start.Version, shortDigest(rs.Start.Digest), rs.Start.Time.Local().Format(time.DateTime), end)
	}
}
