package jsonsize

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBounds: Min <= the real encoded length <= Max, for the encoders that
// matter, on hostile inputs; PrefixWithin respects its bound.
func TestBounds(t *testing.T) {
	tests := map[string]string{
		"empty":       "",
		"ascii":       "hello world",
		"quotes":      `say "hi" \ there`,
		"newlines":    "a\nb\r\nc\t",
		"nul":         strings.Repeat("\x00", 100),
		"escape":      strings.Repeat("\x1b[31m", 20),
		"html":        "<a href='x'>&amp;</a>",
		"invalid":     "\xff\xfe\xfd ok \xc3",
		"multibyte":   "héllo ✓ 日本",
		"separators":  "\u2028\u2029",
		"mixed flood": strings.Repeat("\x00<\"\xffé", 50),
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if lo, hi := Min(s), Max(s); lo > len(b) || len(b) > hi {
				t.Fatalf("Min %d <= encoded %d <= Max %d does not hold", lo, len(b), hi)
			}
			for _, max := range []int{0, 2, 7, 20, 1 << 20} {
				p := PrefixWithin(s, max)
				if !strings.HasPrefix(s, p) {
					t.Fatalf("not a prefix")
				}
				if Max(p) > max && p != "" {
					t.Fatalf("PrefixWithin(%d) encodes to %d", max, Max(p))
				}
			}
		})
	}
}
