package jobs

import (
	"slices"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/backend/sandbox"
	"github.com/overdeck/mcp-backend/systemd"
)

// supervisorCaps are what a sandboxed job's supervisor (job-exec, root)
// and the helper it starts need before the profile applies: a mount (and
// network) namespace and the masks, the credentials and the bounding set
// changed, the job's group killed once it is another user's, the job's
// directory and the masked paths reached whatever their modes.
var supervisorCaps = []int{
	unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETPCAP,
	unix.CAP_KILL, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
}

// unitSandbox is what a sandboxed job's transient unit carries of its
// profile, where systemd can enforce it around the root supervisor (the
// helper still sets the whole profile up inside): no new privileges, the
// bounding set cut to the supervisor's and the profile's capabilities,
// namespaces other than the helper's refused, native system calls only;
// with the profile's system call filter, systemd's for the same groups
// (and @debug) and the clock, modules, hostname, kernel log, devices,
// realtime, personality and set-id files protected, sockets limited to
// unix, IP and netlink; with a read-only profile, the file system read-only
// but the job's directory (the supervisor writes its output and record
// there) and the profile's writable paths, the kernel's tunables and the
// control groups too. No sandbox: nothing (the job is a root shell).
func unitSandbox(s *sandbox.Spec, jobDir string) []systemd.Property {
	if s == nil {
		return nil
	}
	var bset uint64
	for _, c := range slices.Concat(supervisorCaps, s.Caps) {
		bset |= 1 << uint(c)
	}
	ns := uint64(unix.CLONE_NEWNS)
	if !s.Network {
		ns |= unix.CLONE_NEWNET
	}
	p := []systemd.Property{
		{Name: "NoNewPrivileges", Value: true},
		{Name: "CapabilityBoundingSet", Value: bset},
		{Name: "RestrictNamespaces", Value: ns}, // the namespaces allowed
		{Name: "SystemCallArchitectures", Value: []string{"native"}},
	}
	if s.Seccomp {
		p = append(p,
			systemd.Property{Name: "SystemCallFilter", Value: systemd.SyscallFilter{List: []string{"@clock", "@module", "@reboot", "@swap", "@raw-io", "@obsolete", "@cpu-emulation", "@debug"}}},
			systemd.Property{Name: "SystemCallErrorNumber", Value: int32(unix.EPERM)},
			systemd.Property{Name: "ProtectClock", Value: true},
			systemd.Property{Name: "ProtectKernelModules", Value: true},
			systemd.Property{Name: "ProtectHostname", Value: true},
			systemd.Property{Name: "RestrictRealtime", Value: true},
			systemd.Property{Name: "LockPersonality", Value: true},
			systemd.Property{Name: "RestrictSUIDSGID", Value: true},
			// What a reader uses (ss and ip speak netlink); no packet
			// or exotic sockets.
			systemd.Property{Name: "RestrictAddressFamilies", Value: systemd.SyscallFilter{Allow: true, List: []string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}}},
			systemd.Property{Name: "ProtectKernelLogs", Value: true},
			systemd.Property{Name: "PrivateDevices", Value: true},
			systemd.Property{Name: "UMask", Value: uint32(0o077)},
		)
	}
	if s.ReadOnly {
		p = append(p,
			systemd.Property{Name: "ProtectSystem", Value: "strict"},
			systemd.Property{Name: "ReadWritePaths", Value: readWrite(jobDir, s.Writable)},
			systemd.Property{Name: "ProtectKernelTunables", Value: true},
			systemd.Property{Name: "ProtectControlGroups", Value: true},
		)
	}
	return p
}

// readWrite is ReadWritePaths: the job's directory, and the profile's
// writable paths where they exist ("-": systemd skips a missing one, as
// the helper does).
func readWrite(jobDir string, writable []string) []string {
	out := []string{jobDir}
	for _, w := range writable {
		out = append(out, "-"+w)
	}
	return out
}
