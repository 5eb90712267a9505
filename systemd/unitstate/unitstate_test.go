package unitstate

import "testing"

func TestRunning(t *testing.T) {
	for _, tc := range []struct {
		state string
		want  bool
	}{
		{"active", true}, {"activating", true}, {"reloading", true}, {"deactivating", true},
		{"inactive", false}, {"failed", false}, {"maintenance", false}, {"", false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			if got := Running(tc.state); got != tc.want {
				t.Errorf("Running(%q) = %v, want %v", tc.state, got, tc.want)
			}
		})
	}
}
