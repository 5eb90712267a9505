package jobs

import (
	"strings"
	"testing"
	"time"
)

// TestPoolShares: the decisions of the shared places, exactly, on a fake
// clock: caps, the reserve for principals that hold none, max-min shares
// across principals (a refused principal's demand remembered), then
// across a principal's conversations.
func TestPoolShares(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type ask struct {
		f    flow
		at   time.Duration
		want string // "" admitted, else a part of the refusal
	}
	m := func(conv string) flow { return flow{"asserted:mallory", conv} }
	bob := func(conv string) flow { return flow{"asserted:bob", conv} }
	op := flow{"operator:operator", "x"}
	tests := []struct {
		name            string
		cap, perP, perC int
		held            map[flow]int
		refused         []flow // refused at t0
		asks            []ask
	}{
		{"a newcomer takes the reserve", 6, 6, 6, map[flow]int{m("a"): 5}, nil,
			[]ask{{m("b"), 0, "kept for principals that hold none"}, {op, 0, ""}}},
		{"the cap refuses everyone", 6, 6, 6, map[flow]int{m("a"): 5, op: 1}, nil,
			[]ask{{bob("b"), 0, "jobs.maxRunning"}}},
		{"minting conversations stops at the principal's cap", 16, 3, 1, map[flow]int{m("a"): 1, m("b"): 1, m("c"): 1}, nil,
			[]ask{{m("d"), 0, "jobs.maxRunningPerPrincipal"}, {bob("a"), 0, ""}}},
		{"a conversation's cap", 16, 8, 2, map[flow]int{m("a"): 2}, nil,
			[]ask{{m("a"), 0, "jobs.maxRunningPerConversation"}, {m("b"), 0, ""}}},
		// mallory holds 3, bob 1 of 6 (reserve 1): bob was refused, so
		// his demand (2) counts: shares of 5 are 3 and 2. mallory, at
		// her share, is refused the free place; bob takes it.
		{"a refused principal keeps its share", 6, 6, 6, map[flow]int{m("a"): 3, bob("a"): 1}, []flow{bob("b")},
			[]ask{{m("c"), time.Second, "its fair share (3.0)"}, {bob("b"), 2 * time.Second, ""}}},
		{"shares once a place frees", 6, 6, 6, map[flow]int{m("a"): 3, bob("a"): 1}, nil,
			[]ask{{bob("b"), 0, ""}}},
		{"a refusal is forgotten", 6, 6, 6, map[flow]int{m("a"): 3, bob("a"): 1}, []flow{bob("b")},
			[]ask{{m("c"), demandMemory, ""}}},
		// A conversation holding none starts within its principal's
		// share; then the principal is at its cap.
		{"a conversation's share of its principal's", 9, 4, 4, map[flow]int{m("a"): 3}, nil,
			[]ask{{m("b"), 0, ""}, {m("a"), 0, "jobs.maxRunningPerPrincipal"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := newPool("running jobs", "jobs.maxRunning", "jobs.maxRunningPerPrincipal", "jobs.maxRunningPerConversation", tc.cap, tc.perP, tc.perC)
			held := tc.held
			for _, f := range tc.refused {
				pl.refused[f] = t0
			}
			for i, a := range tc.asks {
				why := pl.admit(held, a.f, t0.Add(a.at))
				if (why == "") != (a.want == "") || !strings.Contains(why, a.want) {
					t.Fatalf("ask %d (%v): %q, want %q", i, a.f, why, a.want)
				}
				if why == "" {
					held[a.f]++
				}
			}
		})
	}
	t.Run("within a principal, max-min over its conversations", func(t *testing.T) {
		pl := newPool("running jobs", "c", "p", "v", 12, 4, 4)
		held := map[flow]int{m("a"): 2}
		now := t0
		if why := pl.admit(held, m("b"), now); why != "" { // b holds none: starts
			t.Fatal(why)
		}
		held[m("b")]++
		// a (2) and b (1) of mallory's 4: a wants a third, b a second:
		// conversation shares of 4 over demands a 3, b 2 are 2 and 2.
		pl.refused[m("b")] = now
		if why := pl.admit(held, m("a"), now); !strings.Contains(why, "fair share (2.0) of its principal's") {
			t.Fatalf("a at its share: %q", why)
		}
		if why := pl.admit(held, m("b"), now); why != "" {
			t.Fatalf("b under its share: %q", why)
		}
	})
	t.Run("remembered refusals are bounded", func(t *testing.T) {
		pl := newPool("running jobs", "c", "p", "v", 2, 1, 1)
		held := map[flow]int{m("a"): 1}
		for i := range 3 * maxRemembered {
			pl.admit(held, flow{"asserted:mallory", strings.Repeat("x", i%50) + string(rune('a'+i%26)) + time.Duration(i).String()}, t0)
		}
		if len(pl.refused) > maxRemembered {
			t.Fatalf("%d refusals remembered", len(pl.refused))
		}
	})
}
