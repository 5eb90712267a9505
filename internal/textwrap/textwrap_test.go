package textwrap

import (
	"strings"
	"testing"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		name, in string
		width    int
		want     string
	}{
		{"fits", "  a  b", 10, "  a  b"},
		{"wraps at the last space", "aaa bbb ccc", 7, "aaa bbb\n  ccc"},
		{"keeps indentation", "  x yyyy zzzz", 9, "  x yyyy\n  zzzz"},
		{"long word whole", "aaaaaaaaaa b", 4, "aaaaaaaaaa\n  b"},
		{"wide", "aaa bbb ccc", 0, "aaa bbb ccc"},
	}
	for _, tc := range tests {
		if got := Wrap(tc.in, tc.width, "  "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		for _, l := range strings.Split(Wrap(tc.in, tc.width, "  "), "\n") {
			if tc.width > 0 && len(l) > tc.width && !strings.Contains(tc.name, "long") {
				t.Errorf("%s: line %q over %d", tc.name, l, tc.width)
			}
		}
	}
}
