package units

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"6G", 6 << 30, true},
		{"9G", 9 << 30, true},
		{"512M", 512 << 20, true},
		{"1T", 1 << 40, true},
		{"4096", 4096, true},
		{"64K", 64 << 10, true},
		{"infinity", ^uint64(0), true},
		{"", 0, false},
		{"G", 0, false},
		{"0", 0, false},
		{"1.5G", 0, false},
		{"6g", 0, false},
		{"6GB", 0, false},
		{"99999999999T", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
