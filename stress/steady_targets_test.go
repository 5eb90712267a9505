package stress

import (
	"slices"
	"strings"
	"testing"
)

func TestSteadyTargets(t *testing.T) {
	tunnels := []string{"https://t1.example/", "", "https://t2.example"}
	for _, tc := range []struct {
		name    string
		given   []string
		tunnels []string
		want    []string
		err     string
	}{
		{name: "the tunnels by default", tunnels: tunnels, want: []string{"https://t1.example/", "https://t2.example"}},
		{name: "no target, no tunnel", err: "no --target and no tunnels[].url"},
		{name: "loopback", given: []string{"http://127.0.0.1:8441"}, want: []string{"http://127.0.0.1:8441"}},
		{name: "a tunnel, its slash aside", given: []string{"https://t1.example"}, tunnels: tunnels, want: []string{"https://t1.example"}},
		{name: "a host that is no tunnel", given: []string{"http://192.0.2.1:3211"}, tunnels: tunnels, err: "must be a loopback URL or one of the tunnels' url in the config (https://t1.example, , https://t2.example)"},
		{name: "no host", given: []string{"https://"}, tunnels: []string{"https://"}, err: "want a base URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SteadyTargets(tc.given, tc.tunnels)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("SteadyTargets = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
