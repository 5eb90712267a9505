package view

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/overdeck/mcp-backend/ops/snapshot"
)

// SnapshotList writes the snapshots of stateDir, newest first: a table that
// fits 80 columns (the CREATED column only when Wide), a NOTE column only
// when a snapshot is broken or a pending cutover needs it.
func (p *Printer) SnapshotList(w io.Writer, ls *snapshot.Listing, stateDir string) {
	st := p.St
	if ls.PendingError != nil {
		fmt.Fprintf(w, "%s %v\n", st.Bad.Render("warning:"), ls.PendingError)
	}
	if len(ls.Entries) == 0 {
		fmt.Fprintf(w, "no snapshots in %s\n", stateDir)
		return
	}
	headers := []string{"ID", "CREATED", "VERSION", "REASON", "FILES", "SIZE"}
	rows := make([][]string, 0, len(ls.Entries))
	notes := false
	for _, e := range ls.Entries {
		row := []string{e.ID, e.Created.Local().Format("2006-01-02 15:04:05"), VersionOrNone(e.Version),
			e.Reason, strconv.Itoa(e.Files), Bytes(e.Bytes), ""}
		switch {
		case e.Error != "":
			row[6], notes = st.Bad.Render("BROKEN: "+e.Error), true
		case e.Pending:
			row[6], notes = st.Warn.Render("pending cutover"), true
		}
		rows = append(rows, row)
	}
	if notes {
		headers = append(headers, "NOTE")
	} else {
		for i := range rows {
			rows[i] = rows[i][:6]
		}
	}
	if !p.Wide {
		// The id holds the creation time (UTC) already: the CREATED column
		// is for --wide, so the table fits 80 columns.
		headers = slices.Delete(headers, 1, 2)
		for i := range rows {
			rows[i] = slices.Delete(rows[i], 1, 2)
		}
	}
	fmt.Fprintln(w, p.Table(headers, rows))
}

// SnapshotShow writes a snapshot's manifest and whether every file's
// sha256 still matches.
func (p *Printer) SnapshotShow(w io.Writer, res *snapshot.Checked) {
	st, m := p.St, res.Manifest
	kv := func(k, val string) { fmt.Fprintf(w, "%s %s\n", st.Title.Render(fmt.Sprintf("%-10s", k)), val) }
	kv("id", m.ID)
	kv("created", m.Created.Local().Format(time.RFC3339))
	kv("reason", m.Reason)
	kv("version", VersionOrNone(m.Version))
	if m.Digest != "" {
		kv("digest", m.Digest)
	}
	if m.Current.Exists {
		kv("current", m.Current.Path+" -> "+m.Current.Target)
	} else {
		kv("current", m.Current.Path+" (absent: a restore removes it)")
	}
	if res.OK {
		kv("integrity", st.OK.Render("ok")+" (every sha256 matches)")
	} else {
		kv("integrity", st.Bad.Render("CORRUPT"))
	}
	rows := make([][]string, 0, len(m.Files))
	for _, f := range m.Files {
		if !f.Exists {
			rows = append(rows, []string{f.Role, f.Path, "", "", st.Warn.Render("absent: a restore removes it")})
			continue
		}
		sum := f.SHA256[:16]
		if !p.Wide {
			sum = f.SHA256[:8] // enough to tell files apart; --wide for more
		}
		rows = append(rows, []string{f.Role, f.Path, fmt.Sprintf("%04o", uint32(f.Mode)), Bytes(f.Size), sum})
	}
	fmt.Fprintln(w, p.Table([]string{"ROLE", "PATH", "MODE", "SIZE", "SHA256"}, rows))
	for _, s := range m.Sets {
		fmt.Fprintf(w, "restore replaces %s/%s as a set (files added since are removed)\n", s.Dir, s.Pattern)
	}
}

// SnapshotPrune writes what a prune keeping the newest keep removed (or,
// dry, would remove) and what it kept and why.
func (p *Printer) SnapshotPrune(w io.Writer, res *snapshot.PruneResult, keep int, dry bool) {
	st := p.St
	verb, prefix := "removed", ""
	if dry {
		verb, prefix = "would remove", "dry run: "
	}
	if len(res.Removed) == 0 {
		fmt.Fprintf(w, "%snothing to prune (keeping the newest %d)\n", prefix, keep)
	}
	for _, id := range res.Removed {
		fmt.Fprintf(w, "%s %s\n", st.OK.Render(verb), id)
	}
	for _, id := range res.Protected {
		fmt.Fprintf(w, "%s %s (%s)\n", st.Warn.Render("kept"), id, res.Why[id])
	}
	if dry {
		fmt.Fprintln(w, "nothing was changed")
	}
}

// VersionOrNone is a snapshot's version, or that none was installed.
func VersionOrNone(v string) string {
	if v == "" {
		return "(none installed)"
	}
	return v
}

// Bytes is a size in binary units: 512 B, 1.5 KiB, 3.2 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
