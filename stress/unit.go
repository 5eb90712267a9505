package stress

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/systemd/unitstate"
)

// Units is what sampling a systemd unit needs: its state. The caller passes
// the systemd client in, so the stress links no D-Bus.
type Units interface {
	Unit(ctx context.Context, unit string) (*unitstate.State, error)
}

// UnitStateSampler samples a systemd unit; the memory is the main
// process's RSS (the backend itself, not its short-lived commands) and the
// unit's own cgroup.
type UnitStateSampler struct {
	Units Units
	Name  string
}

var _ UnitSampler = (*UnitStateSampler)(nil)

// OpenUnit returns a sampler of unit read through units, and the unit's
// MemoryHigh (0 when infinite).
func OpenUnit(ctx context.Context, units Units, unit string) (*UnitStateSampler, uint64, error) {
	st, err := units.Unit(ctx, unit)
	if err != nil {
		return nil, 0, err
	}
	high := st.MemoryHigh
	if high == ^uint64(0) {
		high = 0
	}
	return &UnitStateSampler{Units: units, Name: unit}, high, nil
}

// Sample reads the unit's state, then its main process's memory.
func (u *UnitStateSampler) Sample(ctx context.Context) (UnitSample, error) {
	st, err := u.Units.Unit(ctx, u.Name)
	if err != nil {
		return UnitSample{}, err
	}
	if st.LoadState != "loaded" {
		return UnitSample{}, fmt.Errorf("unit %s: LoadState %q (want loaded)", u.Name, st.LoadState)
	}
	s := UnitSample{At: time.Now(), MainPID: st.MainPID, InvocationID: st.InvocationID, NRestarts: st.NRestarts}
	if st.MainPID != 0 {
		if p, err := (&ProcSampler{PID: int(st.MainPID)}).Sample(ctx); err == nil {
			s.MemoryBytes = p.MemoryBytes
		}
		s.CgroupBytes = cgroupMemory(st.MainPID, u.Name)
	}
	return s, nil
}

// cgroupMemory reads the memory of unit's own cgroup through pid, its main
// process (v2 memory.current, or v1 memory.usage_in_bytes); 0 when neither
// is readable.
func cgroupMemory(pid uint32, unit string) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/cgroup")
	if err != nil {
		return 0
	}
	for _, path := range unitCgroupFiles(string(b), unit) {
		v, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64); err == nil {
			return n
		}
	}
	return 0
}

// unitCgroupFiles lists the memory files to try for unit, given the
// /proc/PID/cgroup text of its main process. Only a cgroup of the unit's
// own counts: where the memory controller is not delegated to the unit (a
// container without it, a hybrid host's v1 hierarchy), the process's
// memory cgroup is an ancestor such as "/", whose usage is the whole
// container's or host's, page cache included, and is no figure of the
// unit's.
func unitCgroupFiles(procCgroup, unit string) []string {
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || unit == "" || !strings.HasSuffix(f[2], "/"+unit) {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			files = append(files, "/sys/fs/cgroup"+f[2]+"/memory.current", "/sys/fs/cgroup/unified"+f[2]+"/memory.current")
		case f[1] == "memory":
			files = append(files, "/sys/fs/cgroup/memory"+f[2]+"/memory.usage_in_bytes")
		}
	}
	return files
}
