package demo

import (
	"strings"
	"testing"
)

func TestChangedUnits(t *testing.T) {
	a := Identity{Unit: "a.service", ActiveState: "active", MainPID: 10, InvocationID: "aaaa"}
	b := Identity{Unit: "b.service", ActiveState: "active", MainPID: 20, InvocationID: "bbbb"}
	restarted := b
	restarted.MainPID, restarted.InvocationID = 21, "cccc"
	tests := []struct {
		name          string
		before, after []Identity
		want          []string // the units reported, in order
	}{
		{"none changed", []Identity{a, b}, []Identity{a, b}, nil},
		{"one restarted", []Identity{a, b}, []Identity{a, restarted}, []string{"b.service"}},
		{"one gone", []Identity{a, b}, []Identity{a}, []string{"b.service"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := changedUnits(tc.before, tc.after)
			if len(got) != len(tc.want) {
				t.Fatalf("changedUnits = %q, want the units %q", got, tc.want)
			}
			for i, u := range tc.want {
				if !strings.HasPrefix(got[i], u+" changed") {
					t.Errorf("changedUnits[%d] = %q, want it about %s", i, got[i], u)
				}
			}
		})
	}
}
