package fleet

import (
	"context"
	"errors"
	"os"
	"testing"
)

func TestNewStatus(t *testing.T) {
	inv := threeHosts()
	inv.Path = "/etc/mcpctl-fleet.json"
	for i := range inv.Hosts {
		inv.Hosts[i].User = "ops"
	}
	f := healthy("m1", "sha256:a")
	run := &RunState{Hosts: map[string]*HostRecord{"h1": {Outcome: Verified}, "h3": {}}}
	tests := []struct {
		name       string
		obs        map[string]Observed
		rs         *RunState
		want       []HostStatus
		unreadable string // the host Unreadable names, "" for none
	}{
		{"every host read, no run",
			map[string]Observed{"h1": {Facts: f}, "h2": {Facts: f}, "h3": {Facts: f}}, nil,
			[]HostStatus{{Host: "h1", Address: "ops@127.0.0.1:2201", Facts: f}, {Host: "h2", Address: "ops@127.0.0.1:2202", Facts: f},
				{Host: "h3", Address: "ops@127.0.0.1:2203", Facts: f}}, ""},
		{"outcomes of the last run, where it has one",
			map[string]Observed{"h1": {Facts: f}, "h2": {Facts: f}, "h3": {Facts: f}}, run,
			[]HostStatus{{Host: "h1", Address: "ops@127.0.0.1:2201", Facts: f, LastRun: Verified},
				{Host: "h2", Address: "ops@127.0.0.1:2202", Facts: f}, {Host: "h3", Address: "ops@127.0.0.1:2203", Facts: f}}, ""},
		{"unreadable hosts: the first is named, one not observed has neither",
			map[string]Observed{"h2": {Err: errors.New("ssh: refused")}, "h3": {Err: errors.New("timeout")}}, nil,
			[]HostStatus{{Host: "h1", Address: "ops@127.0.0.1:2201"}, {Host: "h2", Address: "ops@127.0.0.1:2202", Error: "ssh: refused"},
				{Host: "h3", Address: "ops@127.0.0.1:2203", Error: "timeout"}}, "h2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := NewStatus(inv, tc.obs, tc.rs)
			if st.Inventory != inv.Path || st.LastRun != tc.rs || len(st.Hosts) != len(tc.want) {
				t.Fatalf("NewStatus = %+v", st)
			}
			for i, h := range st.Hosts {
				if h != tc.want[i] {
					t.Errorf("host %d = %+v, want %+v", i, h, tc.want[i])
				}
			}
			got := ""
			if h := st.Unreadable(); h != nil {
				got = h.Host
			}
			if got != tc.unreadable {
				t.Fatalf("Unreadable = %q, want %q", got, tc.unreadable)
			}
		})
	}
}

func TestRunnerStatus(t *testing.T) {
	rem := newScripted("sha256:new", "h1", "h2", "h3")
	r, _ := scriptedRunner(t, rem, Halt, 4)
	// No run log yet: every host, no last run.
	st := r.Status(context.Background())
	if st.LastRun != nil || len(st.Hosts) != 3 || st.Unreadable() != nil || st.Hosts[0].Facts == nil {
		t.Fatalf("before any run: %+v", st)
	}
	rs := r.plan(t, "sha256:new")
	r.Run(context.Background(), rs)
	st = r.Status(context.Background())
	if st.LastRun == nil || st.LastRun.Start.Run != "r1" || st.Hosts[0].LastRun != Verified {
		t.Fatalf("after a run: %+v", st)
	}
	// A log that cannot be read shows no run, the hosts still.
	if err := os.WriteFile(r.Log.Path, []byte("{\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st = r.Status(context.Background()); st.LastRun != nil || len(st.Hosts) != 3 {
		t.Fatalf("with a broken log: %+v", st)
	}
}
