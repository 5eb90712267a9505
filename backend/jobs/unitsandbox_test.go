package jobs

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/sandbox"
)

// TestUnitSandbox: a sandboxed job's unit carries what systemd can
// enforce of its profile around the supervisor, and no more than the
// supervisor can live with; a job without a sandbox carries nothing.
func TestUnitSandbox(t *testing.T) {
	resolve := func(name string) *sandbox.Spec {
		p, _ := sandbox.Default().Profile(name)
		s, err := sandbox.Resolve(name, p, nil)
		if err != nil {
			t.Skipf("profile %s on this host: %v", name, err)
		}
		return s
	}
	custom := &sandbox.Spec{Profile: "web", ReadOnly: true, Writable: []string{"/srv/www"}, Caps: []int{unix.CAP_NET_BIND_SERVICE}}
	tests := []struct {
		name     string
		spec     *sandbox.Spec
		has, not []string
		// bounding: capabilities the unit's set must and must not hold.
		keep, drop []int
		rw         []string
	}{
		{"none", nil, nil, []string{"NoNewPrivileges", "ProtectSystem"}, nil, nil, nil},
		{"inspect", resolve(sandbox.Inspect),
			[]string{"NoNewPrivileges", "CapabilityBoundingSet", "RestrictNamespaces", "SystemCallArchitectures", "SystemCallFilter", "ProtectClock", "ProtectKernelModules", "ProtectSystem", "ReadWritePaths", "ProtectKernelTunables", "ProtectControlGroups"},
			nil,
			[]int{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP, unix.CAP_KILL},
			[]int{unix.CAP_NET_ADMIN, unix.CAP_SYS_TIME, unix.CAP_SYS_MODULE, unix.CAP_SYS_PTRACE, unix.CAP_SYS_RAWIO},
			[]string{"/j"}},
		{"root", resolve(sandbox.Root),
			[]string{"NoNewPrivileges", "CapabilityBoundingSet", "RestrictNamespaces"},
			[]string{"SystemCallFilter", "ProtectSystem", "ProtectClock"},
			[]int{unix.CAP_NET_ADMIN, unix.CAP_SYS_TIME, unix.CAP_SYS_ADMIN},
			[]int{unix.CAP_SYS_PTRACE}, nil},
		{"custom read-only", custom,
			[]string{"ProtectSystem", "ReadWritePaths"}, []string{"SystemCallFilter"},
			[]int{unix.CAP_NET_BIND_SERVICE}, []int{unix.CAP_NET_ADMIN},
			[]string{"/j", "-/srv/www"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			props := map[string]any{}
			for _, p := range unitSandbox(tc.spec, "/j") {
				props[p.Name] = p.Value
			}
			for _, n := range tc.has {
				if _, ok := props[n]; !ok {
					t.Errorf("no %s in %v", n, props)
				}
			}
			for _, n := range tc.not {
				if _, ok := props[n]; ok {
					t.Errorf("%s = %v, want none", n, props[n])
				}
			}
			bset, _ := props["CapabilityBoundingSet"].(uint64)
			for _, c := range tc.keep {
				if bset&(1<<c) == 0 {
					t.Errorf("bounding set %#x lacks capability %d", bset, c)
				}
			}
			for _, c := range tc.drop {
				if bset&(1<<c) != 0 {
					t.Errorf("bounding set %#x holds capability %d", bset, c)
				}
			}
			if tc.rw != nil {
				if got, _ := props["ReadWritePaths"].([]string); len(got) != len(tc.rw) || got[0] != tc.rw[0] || got[len(got)-1] != tc.rw[len(tc.rw)-1] {
					t.Errorf("ReadWritePaths = %v, want %v", got, tc.rw)
				}
			}
			if ns, ok := props["RestrictNamespaces"].(uint64); ok && ns&^uint64(unix.CLONE_NEWNS|unix.CLONE_NEWNET) != 0 {
				t.Errorf("RestrictNamespaces allows %#x: more than the helper's mount and network namespaces", ns)
			}
		})
	}
}
