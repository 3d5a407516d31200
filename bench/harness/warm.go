//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// residency is what `caddy flash-serve residency --json` says of a set of
// paths, summed.
type residency struct {
	bytes, known, resident int64
}

func (r residency) percent() float64 {
	if r.known == 0 {
		return 0
	}
	return 100 * float64(r.resident) / float64(r.known)
}

// checkResidency asks flash_serve's own residency command (mincore over
// every file) how much of paths is in the page cache.
func checkResidency(cfg *config, paths []string) (residency, error) {
	args := append([]string{"flash-serve", "residency", "--json", "--top", "0"}, paths...)
	out, err := exec.Command(cfg.caddy, args...).Output()
	if err != nil {
		return residency{}, fmt.Errorf("%s flash-serve residency: %v", cfg.caddy, err)
	}
	var sum residency
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Bytes         int64  `json:"bytes"`
			ResidentBytes *int64 `json:"resident_bytes"`
			UnknownBytes  int64  `json:"unknown_bytes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return residency{}, fmt.Errorf("flash-serve residency printed %q: %v", sc.Text(), err)
		}
		sum.bytes += r.Bytes
		sum.known += r.Bytes - r.UnknownBytes
		if r.ResidentBytes != nil {
			sum.resident += *r.ResidentBytes
		}
	}
	if sum.bytes > 0 && sum.known == 0 {
		return sum, fmt.Errorf("the residency of %s is unknown to this user", strings.Join(paths, " "))
	}
	return sum, nil
}

// ensureResident checks that the files a warm workload reads are in the
// page cache; if some are not, it reads them all again with flash-serve
// prewarm and checks once more. It returns the two percentages (after is
// before when nothing had to be read).
func ensureResident(cfg *config, rel []string) (before, after float64, err error) {
	paths := make([]string, len(rel))
	for i, p := range rel {
		paths[i] = filepath.Join(cfg.data, p)
	}
	r, err := checkResidency(cfg, paths)
	if err != nil {
		return 0, 0, err
	}
	before = r.percent()
	if r.resident >= r.known {
		return before, before, nil
	}
	args := append([]string{"flash-serve", "prewarm", "--budget", "0", "--workers", "4"}, paths...)
	if out, err := exec.Command(cfg.caddy, args...).CombinedOutput(); err != nil {
		return before, 0, fmt.Errorf("flash-serve prewarm: %v: %s", err, firstLine(string(out)))
	}
	r, err = checkResidency(cfg, paths)
	if err != nil {
		return before, 0, err
	}
	return before, r.percent(), nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// cpuSeconds is the user+system CPU time of a process, all its threads
// together, from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (field 3, state, is the first).
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	return (utime + stime) / clockTicks, nil
}
