package deploy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// duplicates finds processes other than production's own (own: the main
// PID of each production unit, both slots included: a slot in standby holds
// the shared socket too) listening on listen's port: a second supervisor (a
// stray manual run, another unit) would keep serving the old build, or steal
// the port from the new one. With ownSocket (the backend's socket unit is
// active) PID 1 holds the port for production and is not one. Best effort:
// what /proc cannot show is not reported.
func duplicates(listen string, own []int, ownSocket bool) []string {
	_, p, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeners(f, port, inodes)
	}
	if len(inodes) == 0 {
		return nil
	}
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || slices.Contains(own, pid) || (ownSocket && pid == 1) || slices.Contains(own, parent(pid)) {
			// A child of the backend holds its listening socket between fork
			// and exec (the descriptor closes at exec): not a supervisor.
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
				comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
				out = append(out, fmt.Sprintf("pid %d (%s) also listens on port %d", pid, strings.TrimSpace(string(comm)), port))
				break
			}
		}
	}
	return out
}

// listeners adds the socket inodes listening on port in a /proc/net/tcp file.
func listeners(path string, port int, inodes map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
			continue
		}
		i := strings.LastIndexByte(fs[1], ':')
		if p, err := strconv.ParseUint(fs[1][i+1:], 16, 16); err == nil && int(p) == port {
			inodes[fs[9]] = true
		}
	}
}

// parent is pid's parent process id, 0 when unknown.
func parent(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
