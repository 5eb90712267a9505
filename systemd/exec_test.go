package systemd

import (
	"fmt"
	"testing"
)

func TestDecodeExec(t *testing.T) {
	tests := []struct {
		name    string
		in      any
		want    string
		wantErr bool
	}{
		{"two commands", [][]any{
			{"/bin/sleep", []string{"/bin/sleep", "1"}, false, uint64(0), uint64(0), uint64(0), uint64(0), uint32(0), int32(0), int32(0)},
			{"/bin/true", []string{"true"}, true, uint64(0), uint64(0), uint64(0), uint64(0), uint32(0), int32(0), int32(0)},
		}, "[{/bin/sleep [/bin/sleep 1]} {/bin/true [true]}]", false},
		{"none", [][]any{}, "[]", false},
		{"not an array", "oops", "", true},
		{"short struct", [][]any{{"/bin/x"}}, "", true},
		{"wrong field types", [][]any{{1, "x"}}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeExec(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && fmt.Sprint(got) != tc.want {
				t.Fatalf("got %v, want %s", got, tc.want)
			}
		})
	}
}
