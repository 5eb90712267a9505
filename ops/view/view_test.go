package view

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/ops/fleet"
	"github.com/overdeck/mcp-backend/ops/outcome"
)

// TestBytes: sizes in the largest binary unit under 1024 of it.
func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {5 << 20, "5.0 MiB"}, {3 << 30, "3.0 GiB"},
	} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestTablePlain: off a terminal a table is columns separated by spaces,
// no borders, no escape codes, no trailing blanks (easy to grep).
func TestTablePlain(t *testing.T) {
	p := NewPrinter(&bytes.Buffer{}, false)
	got := p.Table([]string{"ID", "VERSION"}, [][]string{{"a", p.St.Bad.Render("v1")}, {"bb", ""}})
	want := "ID  VERSION\na   v1\nbb"
	if got != want {
		t.Fatalf("table:\n%q\nwant\n%q", got, want)
	}
	if p.Color || p.Width() != TextWidth {
		t.Fatalf("a buffer gets colour %v, width %d", p.Color, p.Width())
	}
}

// TestFleetLive: the live view of a run prints a line per step and host as
// they end, names a cutover that rolled back, and draws the table after the
// wave; with --json each event is one JSON line, nothing else.
func TestFleetLive(t *testing.T) {
	inv := &fleet.Inventory{Hosts: []fleet.Host{{Name: "a"}, {Name: "b"}}}
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	zero, rolled := 0, outcome.RolledBack
	events := []fleet.Event{
		{Type: fleet.EvWaveStart, Wave: 1, Detail: "a,b"},
		{Type: fleet.EvStepStart, Host: "a", Step: "canary", Time: t0},
		{Type: fleet.EvStepEnd, Host: "a", Step: "canary", ExitCode: &zero},
		{Type: fleet.EvStepEnd, Host: "b", Step: "cutover", ExitCode: &rolled},
		{Type: fleet.EvHostEnd, Host: "a", Outcome: fleet.Verified, Time: t0.Add(2 * time.Second), From: "v1"},
		{Type: fleet.EvHostEnd, Host: "b", Outcome: fleet.RolledBack, Detail: "rolled back"},
		{Type: fleet.EvWaveEnd, Wave: 1, Decision: "halt", Detail: "one host failed"},
	}
	var text bytes.Buffer
	v := NewFleet(&text, false, NewPrinter(&text, true), inv)
	v.SetPlan(&fleet.Plan{Version: "v2", Hosts: []fleet.HostPlan{{Host: "a", Wave: 1, From: "v1"}, {Host: "b", Wave: 1, From: "v1"}}})
	for _, e := range events {
		v.Event(e)
	}
	for _, want := range []string{"wave 1: a, b\n", "  a            canary         ok\n", "  b            cutover        exit 3\n",
		"a     1     v1 -> v2    ok", "rolled back  FAIL", "2s    verified", "wave 1: halt, one host failed\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("live view lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	v = NewFleet(&js, true, NewPrinter(&js, true), inv)
	for _, e := range events {
		v.Event(e)
	}
	lines := strings.Split(strings.TrimSuffix(js.String(), "\n"), "\n")
	if len(lines) != len(events) {
		t.Fatalf("%d JSON lines for %d events:\n%s", len(lines), len(events), js.String())
	}
	for _, l := range lines {
		var e fleet.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
	}
}
