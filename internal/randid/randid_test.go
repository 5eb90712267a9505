package randid

import "testing"

func TestValid(t *testing.T) {
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{"fresh", New('j'), true},
		{"other prefix", New('a'), false},
		{"upper hex", "j0123456789ABCDEF", false},
		{"short", "j0123", false},
		{"path", "j/../../etc/pass", false},
		{"not hex", "j0123456789abcdeg", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Valid('j', tt.id); got != tt.want {
				t.Fatalf("Valid(j, %q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
	if a, b := New('j'), New('j'); a == b {
		t.Fatalf("two ids alike: %s", a)
	}
}
