package procfs

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		in   string
		ok   bool
		want Stat
	}{
		{
			name: "name with spaces and parentheses",
			in:   "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 12345 1000000 77 18446744073709551615",
			ok:   true,
			want: Stat{PID: 4242, Comm: "a (b) c", State: "S", PPID: 1, PGID: 4242, Flags: 4194560, UTime: 250, STime: 50, Threads: 3, StartTicks: 12345, RSSPages: 77},
		},
		{name: "garbage", in: "garbage"},
		{name: "no pid", in: "(x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22"},
		{name: "too few fields", in: "1 (x) S 1 2 3"},
		{name: "unbalanced", in: "1 )x( S"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Parse([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("Parse ok = %v, want %v", ok, tc.ok)
			}
			if ok && got != tc.want {
				t.Fatalf("Parse = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestReadSelf(t *testing.T) {
	s, ok := Read(os.Getpid())
	if !ok || s.PID != os.Getpid() || s.PPID != os.Getppid() || s.StartTicks <= 0 {
		t.Fatalf("Read(self) = %+v, %v", s, ok)
	}
	for _, pid := range []int{0, -1} {
		if _, ok := Read(pid); ok {
			t.Fatalf("Read(%d) ok", pid)
		}
	}
}
