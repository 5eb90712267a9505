package deploy

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestDuplicates(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	tests := []struct {
		name    string
		mainPID int
		want    int
	}{
		{"we are the supervisor", os.Getpid(), 0},
		{"someone else is", 1 << 30, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := duplicates(addr, []int{tc.mainPID}, false)
			if len(got) != tc.want {
				t.Fatalf("duplicates = %q, want %d", got, tc.want)
			}
			if tc.want > 0 && !strings.Contains(got[0], "also listens") {
				t.Fatalf("duplicates = %q", got)
			}
		})
	}
}

// TestDuplicatesSkipsTheBackendsChildren: a child of the backend holds its
// listening socket for a moment (between fork and exec); it is no second
// supervisor. The child here keeps the socket for good, which is the same
// to the check.
func TestDuplicatesSkipsTheBackendsChildren(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if got := duplicates(ln.Addr().String(), []int{os.Getpid()}, false); len(got) != 0 {
		t.Fatalf("duplicates = %q, want none: the only other holder is our child", got)
	}
	if got := duplicates(ln.Addr().String(), []int{1 << 30}, false); len(got) != 2 {
		t.Fatalf("duplicates = %q, want us and our child when another process is production", got)
	}
}
