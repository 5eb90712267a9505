package tools

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
	"golang.org/x/sys/unix"
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
}

func (t *Tools) systemInfo(_ context.Context, _ SystemInfoInput) (SystemInfoResult, error) {
	var res SystemInfoResult
	res.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		res.OS = OSInfo{
			Kernel:  unix.ByteSliceToString(u.Sysname[:]),
			Release: unix.ByteSliceToString(u.Release[:]),
			Version: unix.ByteSliceToString(u.Version[:]),
			Machine: unix.ByteSliceToString(u.Machine[:]),
		}
	}
	res.OS.Name = osName()
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			res.UptimeSeconds, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			res.Load.One, _ = strconv.ParseFloat(f[0], 64)
			res.Load.Five, _ = strconv.ParseFloat(f[1], 64)
			res.Load.Fifteen, _ = strconv.ParseFloat(f[2], 64)
		}
	}
	res.Memory = memInfo()
	res.CPUCount = runtime.NumCPU()
	res.Backend = BackendInfo{
		Version:       buildinfo.Version,
		Commit:        buildinfo.Commit,
		Build:         buildinfo.ExecutableDigest(),
		GoVersion:     runtime.Version(),
		PID:           selfPID,
		StartedAt:     t.started.UTC().Format(time.RFC3339),
		UptimeSeconds: int64(time.Since(t.started).Seconds()),
	}
	if t.opts.Admission != nil {
		res.Admission = t.opts.Admission()
	}
	return res, nil
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
