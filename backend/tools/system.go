package tools

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"github.com/overdeck/mcp-backend/mcpwire"
)

// SystemInfoInput is the (empty) input of system.info.
type SystemInfoInput struct{}

// SystemInfoResult is the result of system.info.
type SystemInfoResult struct {
	Hostname      string      `json:"hostname"`
	OS            OSInfo      `json:"os"`
	UptimeSeconds float64     `json:"uptimeSeconds"`
	Load          LoadInfo    `json:"load"`
	Memory        MemoryInfo  `json:"memory"`
	CPUCount      int         `json:"cpuCount"`
	Backend       BackendInfo `json:"backend"`
	Admission     any         `json:"admission,omitempty" jsonschema:"admission controller snapshot (same shape as /metrics)"`
}

// OSInfo names the operating system and kernel.
type OSInfo struct {
	Name    string `json:"name" jsonschema:"PRETTY_NAME from os-release"`
	Kernel  string `json:"kernel" jsonschema:"uname sysname"`
	Release string `json:"release" jsonschema:"uname release"`
	Version string `json:"version" jsonschema:"uname version"`
	Machine string `json:"machine"`
}

// LoadInfo holds the load averages.
type LoadInfo struct {
	One     float64 `json:"one"`
	Five    float64 `json:"five"`
	Fifteen float64 `json:"fifteen"`
}

// MemoryInfo comes from /proc/meminfo, in bytes.
type MemoryInfo struct {
	TotalBytes     int64 `json:"totalBytes"`
	AvailableBytes int64 `json:"availableBytes"`
	FreeBytes      int64 `json:"freeBytes"`
	SwapTotalBytes int64 `json:"swapTotalBytes"`
	SwapFreeBytes  int64 `json:"swapFreeBytes"`
}

// BackendInfo identifies the running backend build.
type BackendInfo struct {
	Version       string `json:"version"`
	Commit        string `json:"commit,omitempty"`
	Build         string `json:"build" jsonschema:"sha256 of the running executable"`
	GoVersion     string `json:"goVersion"`
	PID           int    `json:"pid"`
	StartedAt     string `json:"startedAt" jsonschema:"RFC3339"`
	UptimeSeconds int64  `json:"uptimeSeconds"`
	JobsMode      string `json:"jobsMode" jsonschema:"how jobs run: systemd (transient units, they outlive the backend), process (process groups of the backend, they end with it) or off"`
}

// staticOS is read once: the kernel and the OS release do not change under a
// running process, and system.info is the operator's cheap look at the host.
var staticOS = sync.OnceValue(func() OSInfo {
	var o OSInfo
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		o = OSInfo{
			Kernel:  unix.ByteSliceToString(u.Sysname[:]),
			Release: unix.ByteSliceToString(u.Release[:]),
			Version: unix.ByteSliceToString(u.Version[:]),
			Machine: unix.ByteSliceToString(u.Machine[:]),
		}
	}
	o.Name = osName()
	return o
})

func (t *Tools) systemInfo(_ context.Context, _ SystemInfoInput) (SystemInfoResult, error) {
	var res SystemInfoResult
	res.Hostname, _ = os.Hostname()
	res.OS = staticOS()
	// One sysinfo(2) call instead of parsing /proc/uptime and /proc/loadavg.
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		const loadScale = 1 << 16 // SI_LOAD_SHIFT
		res.UptimeSeconds = float64(si.Uptime)
		res.Load.One = float64(si.Loads[0]) / loadScale
		res.Load.Five = float64(si.Loads[1]) / loadScale
		res.Load.Fifteen = float64(si.Loads[2]) / loadScale
	}
	res.Memory = cachedMemInfo()
	res.CPUCount = runtime.NumCPU()
	res.Backend = BackendInfo{
		Version:       buildinfo.Version,
		Commit:        buildinfo.Commit,
		Build:         buildinfo.ExecutableDigest(),
		GoVersion:     runtime.Version(),
		PID:           selfPID,
		StartedAt:     t.started.UTC().Format(time.RFC3339),
		UptimeSeconds: int64(time.Since(t.started).Seconds()),
		JobsMode:      t.jobsMode(),
	}
	if t.opts.Admission != nil {
		res.Admission = t.opts.Admission()
	}
	return res, nil
}

// memInfoTTL bounds how stale system.info's memory figures may be. The
// kernel builds /proc/meminfo on every read, which made it the largest cost
// of the call; many conversations polling the host share one reading.
const memInfoTTL = time.Second

var memCache struct {
	sync.Mutex
	at time.Time
	m  MemoryInfo
}

func cachedMemInfo() MemoryInfo {
	memCache.Lock()
	defer memCache.Unlock()
	if now := time.Now(); now.Sub(memCache.at) >= memInfoTTL {
		memCache.m, memCache.at = memInfo(), now
	}
	return memCache.m
}

// memInfo parses /proc/meminfo (values in kB).
func memInfo() MemoryInfo {
	var m MemoryInfo
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return m
	}
	fields := map[string]*int64{
		"MemTotal": &m.TotalBytes, "MemAvailable": &m.AvailableBytes, "MemFree": &m.FreeBytes,
		"SwapTotal": &m.SwapTotalBytes, "SwapFree": &m.SwapFreeBytes,
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		dst := fields[key]
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		*dst = v
	}
	return m
}

// osName returns PRETTY_NAME from os-release, or "".
func osName() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				if s, err := strconv.Unquote(v); err == nil {
					return s
				}
				return strings.Trim(v, `"'`)
			}
		}
	}
	return ""
}

func (t *Tools) jobsMode() string {
	if t.opts.Jobs == nil {
		return mcpwire.JobModeOff
	}
	return t.opts.Jobs.Mode()
}
