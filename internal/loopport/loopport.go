// Package loopport reserves loopback ports that are picked now and bound
// later: a canary's port chosen before its container starts, a demo site's
// tunnel ports. Ports from "127.0.0.1:0" come from the kernel's ephemeral
// range, which every outgoing connection on the host draws from too; with
// thousands of connections open beside a long container test, one of them
// took a canary's port between the pick and the bind. So Reserve picks
// outside that range and locks a file named for each port, which every
// process reserving through the same directory respects.
package loopport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// reservedFloor keeps clear of well-known and registered low ports.
const reservedFloor = 10000

// Dir is where the ports' lock files live, shared by every process on
// the host.
func Dir() string { return filepath.Join(os.TempDir(), "mcp-backend-loopback-ports") }

// Reserve scans the ports outside the ephemeral range from a point seed
// chooses, and returns the first one it can lock in dir and bind. Nobody
// else who reserves through dir gets it until release is called or the
// process exits.
func Reserve(dir string, seed int64) (port int, release func(), err error) {
	ranges, err := portsOutsideEphemeral()
	if err != nil {
		return 0, nil, err
	}
	n := 0
	for _, r := range ranges {
		n += r[1] - r[0] + 1
	}
	if n == 0 {
		return 0, nil, errors.New("no loopback port outside the ephemeral range")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, fmt.Errorf("port locks: %w", err)
	}
	start := int(uint64(seed) % uint64(n))
	for i := 0; i < n; i++ {
		p := nthPort(ranges, (start+i)%n)
		f, ok := lockPort(dir, p)
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			f.Close()
			continue
		}
		ln.Close()
		return p, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("no free loopback port among %d outside the ephemeral range", n)
}

// lockPort takes the port's lock without waiting. A lock belongs to the
// open file, so a second Reserve in the same process is refused as well.
func lockPort(dir string, p int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// portsOutsideEphemeral returns the inclusive port ranges at or above
// reservedFloor that the kernel never picks for an outgoing connection.
func portsOutsideEphemeral() ([][2]int, error) {
	lo, hi := 32768, 60999 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("ip_local_port_range %q: not two ports", strings.TrimSpace(string(b)))
			}
			lo, hi = l, h
		}
	}
	var rs [][2]int
	if lo-1 >= reservedFloor {
		rs = append(rs, [2]int{reservedFloor, lo - 1})
	}
	if hi+1 <= 65535 {
		rs = append(rs, [2]int{max(hi+1, reservedFloor), 65535})
	}
	return rs, nil
}

func nthPort(rs [][2]int, i int) int {
	for _, r := range rs {
		if w := r[1] - r[0] + 1; i >= w {
			i -= w
			continue
		}
		return r[0] + i
	}
	panic("loopport: port index out of range")
}
