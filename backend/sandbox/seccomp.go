package sandbox

import (
	"errors"
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// alwaysDenied are refused in every profile, root included: they would
// undo the masks (mounts, new namespaces, a handle that opens a file
// without its path) or reach another process's memory and view
// (ptrace, process_vm_*).
var alwaysDenied = []string{
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr",
	"unshare", "setns",
	"open_by_handle_at",
	"ptrace", "process_vm_readv", "process_vm_writev",
}

// hostDenied are refused with Profile.Seccomp: what changes the host
// below the file system (systemd's @clock, @module, @reboot, @swap,
// @raw-io).
var hostDenied = []string{
	"adjtimex", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64", "settimeofday", "stime",
	"delete_module", "finit_module", "init_module", "create_module",
	"kexec_file_load", "kexec_load", "reboot",
	"swapon", "swapoff",
	"ioperm", "iopl", "pciconfig_iobase", "pciconfig_read", "pciconfig_write", "s390_pci_mmio_read", "s390_pci_mmio_write",
}

// namespaceFlags are clone's CLONE_NEW* flags: a clone that asks for any
// of them is refused like unshare.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// filterPolicy is the profile's filter: EPERM for the denied calls,
// clone with a namespace flag included; clone3 gets ENOSYS (its flags sit
// behind a pointer a filter cannot read; the C library then falls back to
// clone).
func filterPolicy(host bool) (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, err
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	deny := known(alwaysDenied)
	if host {
		deny = append(deny, known(hostDenied)...)
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno | seccomp.Action(unix.EPERM), Names: deny},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: known([]string{"clone3"})},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.EPERM), NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "clone",
				Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}},
			}}},
		},
	}, nil
}

// loadFilter installs the filter on the calling thread. A system call of
// another architecture (the 32-bit ABI of a 64-bit kernel) kills the
// process: a deny list is only whole for the calls it names, so this
// prefix is the only part not assembled by the library.
func loadFilter(host bool) error {
	pol, err := filterPolicy(host)
	if err != nil {
		return err
	}
	insts, err := pol.Assemble()
	if err != nil {
		return err
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return err
	}
	prefix := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}
	raw, err := bpf.Assemble(append(prefix, insts...))
	if err != nil {
		return err
	}
	if len(raw) > 0xffff {
		return errors.New("filter too long")
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}

// Supported says whether this kernel takes system call filters.
func Supported() bool { return seccomp.Supported() }
