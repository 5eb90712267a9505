package deploy

import (
	"net"
	"os"
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
			got := duplicates(addr, tc.mainPID)
			if len(got) != tc.want {
				t.Fatalf("duplicates = %q, want %d", got, tc.want)
			}
			if tc.want > 0 && !strings.Contains(got[0], "also listens") {
				t.Fatalf("duplicates = %q", got)
			}
		})
	}
}
