package status

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// CgroupControllers is where a cgroup v2 (unified) hierarchy lists the
// controllers the host offers.
const CgroupControllers = "/sys/fs/cgroup/cgroup.controllers"

// MemoryWarning says what is not enforced when the host offers no cgroup
// v2 memory controller (a cgroup v1 or hybrid host, or one that disabled
// it): systemd cannot apply the units' MemoryHigh=/MemoryMax= and the
// backend's memory guard, which reads the cgroup v2 files, is off. It is
// "" when controllers (the path of CgroupControllers) lists memory.
func MemoryWarning(controllers string) string {
	b, err := os.ReadFile(controllers)
	var why string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		why = "no cgroup v2 hierarchy on this host (" + controllers + " is missing)"
	case err != nil:
		why = "the cgroup v2 controllers cannot be read (" + err.Error() + ")"
	case !slices.Contains(strings.Fields(string(b)), "memory"):
		why = "the host's cgroup v2 hierarchy offers no memory controller (" + controllers + ")"
	default:
		return ""
	}
	return why + ": the units' MemoryHigh/MemoryMax are not applied and the backend's memory guard is off"
}
