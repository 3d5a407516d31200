//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// workload is one row group of the table.
type workload struct {
	id, title string
	// unit of the primary figure: "req/s" or "GB/s".
	unit string
	// run measures one server once.
	run func(cfg *config, s *server) (measurement, error)
	// syscalls, if set, is the h2load command that sends a fixed number of
	// requests while perf counts the server's syscalls.
	syscalls func(cfg *config, s *server) []string
	// cold evicts the page cache before every run.
	cold bool
	// resident lists the files or folders under the data set that a warm
	// workload reads: before every run the harness checks that they are in
	// the page cache (this VM drops pages on its own) and reads them again
	// if they are not.
	resident []string
	// cpuPerGiB reports the server's CPU time per GiB of body sent.
	cpuPerGiB bool
}

// measurement is one run of one workload against one server.
type measurement struct {
	value    float64 // in the workload's unit
	mbps     float64 // body MB/s (10^6)
	p50, p99 float64 // latency, ms; 0 if not measured
	errors   int     // non-2xx/3xx responses where they are not expected, socket errors
	note     string
	filesPS  float64 // files per second, for k
	bytes    float64 // body bytes received, where the load generator counts them
	cpuSecs  float64 // the server's user+system CPU time during the run
	// round is the round of interleaved runs (1, 2, …) this run belongs
	// to: the runs of one round, one per server, follow each other, so the
	// ratio of two servers' runs of one round is measured under the same
	// conditions of the machine (pairStats).
	round int
}

func workloads(cfg *config) []workload {
	d := cfg.data
	big := cfg.set.bigSize
	manyURIs := filepath.Join(cfg.work, "many.uris")
	missingURIs := filepath.Join(cfg.work, "missing.uris")
	h1Syscalls := func(target string, extra ...string) func(*config, *server) []string {
		return func(cfg *config, s *server) []string {
			args := []string{"h2load", "--h1", "-n", strconv.Itoa(cfg.syscallRequests), "-c", "16"}
			args = append(args, extra...)
			if strings.HasSuffix(target, ".uris") {
				return append(args, "-i", target, "--base-uri", s.url(""))
			}
			return append(args, s.url(target))
		}
	}
	_ = d
	return []workload{
		{id: "a", title: "1 KiB hot, 64 conns", unit: "req/s",
			run:      func(cfg *config, s *server) (measurement, error) { return wrk(cfg, 64, s.url("/1k.bin"), "", 1024) },
			syscalls: h1Syscalls("/1k.bin"), resident: []string{"1k.bin"}},
		{id: "b", title: "64 KiB hot, 64 conns", unit: "req/s",
			run:      func(cfg *config, s *server) (measurement, error) { return wrk(cfg, 64, s.url("/64k.bin"), "", 64<<10) },
			syscalls: h1Syscalls("/64k.bin"), resident: []string{"64k.bin"}},
		{id: "c", title: fmt.Sprintf("%s hot, 1 stream", sizeName(big)), unit: "GB/s",
			run:      func(cfg *config, s *server) (measurement, error) { return curlStreams(cfg, 1, s.url("/1g.bin"), false) },
			resident: []string{"1g.bin"}, cpuPerGiB: true},
		{id: "d", title: fmt.Sprintf("%s hot, 8 streams", sizeName(big)), unit: "GB/s",
			run:      func(cfg *config, s *server) (measurement, error) { return curlStreams(cfg, 8, s.url("/1g.bin"), false) },
			resident: []string{"1g.bin"}, cpuPerGiB: true},
		{id: "e", title: fmt.Sprintf("%d × 8 KiB random, 200 conns, warm", cfg.set.manyCount()), unit: "req/s",
			run: func(cfg *config, s *server) (measurement, error) {
				return wrk(cfg, 200, s.url(""), manyURIs, int64(cfg.set.manyFileSize))
			},
			syscalls: h1Syscalls(manyURIs), resident: []string{"many"}},
		{id: "f", title: fmt.Sprintf("%d × 8 KiB random, 200 conns, cold", cfg.set.manyCount()), unit: "req/s", cold: true,
			run: func(cfg *config, s *server) (measurement, error) {
				return wrk(cfg, 200, s.url(""), manyURIs, int64(cfg.set.manyFileSize))
			}},
		{id: "g", title: "404 storm, 64 conns", unit: "req/s",
			run: func(cfg *config, s *server) (measurement, error) {
				m, err := wrk(cfg, 64, s.url(""), missingURIs, 0)
				m.errors = 0 // every response is a 404 on purpose
				return m, err
			},
			syscalls: h1Syscalls(missingURIs)},
		// g asks for 50,000 missing names over and over, so a negative
		// cache answers most of it after the first pass; g2 is the case no
		// cache can help: every request a name nothing asked for before.
		{id: "g2", title: "404s, every name new, 64 conns", unit: "req/s",
			run: func(cfg *config, s *server) (measurement, error) {
				m, err := wrkDistinct404(cfg, 64, s.url(""), cfg.duration)
				m.errors = 0 // every response is a 404 on purpose
				return m, err
			},
			// h2load -i sends its list in the same order on each of its
			// connections, so names would repeat: wrk with the same script,
			// its request count read from its output (countSyscalls).
			syscalls: func(cfg *config, s *server) []string {
				return distinct404Args(cfg, 16, s.url(""), cfg.duration)
			}},
		{id: "h1", title: fmt.Sprintf("HTTPS %s over HTTP/1.1", sizeName(big)), unit: "GB/s",
			run: func(cfg *config, s *server) (measurement, error) {
				return curlStreams(cfg, 1, s.tlsURL("/1g.bin"), true)
			},
			resident: []string{"1g.bin"}, cpuPerGiB: true},
		{id: "h2", title: "HTTPS 1 KiB over HTTP/2, h2load -m 10", unit: "req/s",
			run:      func(cfg *config, s *server) (measurement, error) { return h2loadRun(cfg, s.tlsURL("/1k.bin")) },
			resident: []string{"1k.bin"}},
		{id: "i", title: "random 64 KiB ranges of the big file", unit: "req/s",
			run: func(cfg *config, s *server) (measurement, error) {
				return wrkRanges(cfg, s.url("/1g.bin"), big)
			},
			syscalls: h1Syscalls("/1g.bin", "-H", "Range: bytes=1048576-1114111"), resident: []string{"1g.bin"}},
	}
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

// loadgen runs a load generator pinned to CPU 1 and returns its output.
func loadgen(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", "1"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

const pathsLua = `local paths = {}
local i = 0
init = function(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
  math.randomseed(os.time())
  i = math.random(#paths)
end
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
`

const rangesLua = `local size = 0
init = function(args)
  size = tonumber(args[1])
  math.randomseed(42)
end
request = function()
  local s = math.random(0, size - 65536)
  return wrk.format("GET", "/1g.bin", {["Range"] = "bytes=" .. s .. "-" .. (s + 65535)})
end
`

// distinct404Lua asks, on every request, for a name that no request of the
// bench run asked before: a missing file in one of the many tree's
// directories (spread over them as g's names are, so that every lookup
// reaches an existing directory), named after a tag that is new for every
// wrk run (args[1]), the wrk thread and a counter. args[2] is the number of
// directories.
const distinct404Lua = `local tag, dirs, n = "", 1, 0
local threads = 0
setup = function(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
init = function(args)
  tag = args[1]
  dirs = tonumber(args[2])
end
request = function()
  n = n + 1
  return wrk.format("GET", string.format("/many/d%03d/missing-%s-%d-%d.bin", n % dirs, tag, tid or 0, n))
end
`

// distinct404Args is the wrk command of g2 for d: conns connections, each
// request a name not asked before.
func distinct404Args(cfg *config, conns int, url string, d time.Duration) []string {
	script := filepath.Join(cfg.work, "distinct404.lua")
	os.WriteFile(script, []byte(distinct404Lua), 0o644)
	// A tag new for every call: runs, servers and the syscall count never
	// share a name.
	distinctTag++
	tag := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(distinctTag)
	return []string{"wrk", "-t1", "-c" + strconv.Itoa(conns), "-d" + fmt.Sprintf("%ds", max(1, int(d.Seconds()))),
		"--timeout", "10s", "--latency", "-s", script, url, "--", tag, strconv.Itoa(cfg.set.dirs)}
}

var distinctTag int

func wrkDistinct404(cfg *config, conns int, url string, d time.Duration) (measurement, error) {
	out, err := loadgen(d+30*time.Second, distinct404Args(cfg, conns, url, d)...)
	if err != nil {
		return measurement{}, err
	}
	return parseWrk(out, 0), nil
}

func wrk(cfg *config, conns int, url, uris string, bodyBytes int64) (measurement, error) {
	args := []string{"wrk", "-t1", "-c" + strconv.Itoa(conns), "-d" + cfg.durationArg(), "--timeout", "10s", "--latency"}
	if uris != "" {
		script := filepath.Join(cfg.work, "paths.lua")
		os.WriteFile(script, []byte(pathsLua), 0o644)
		args = append(args, "-s", script, url, "--", uris)
	} else {
		args = append(args, url)
	}
	out, err := loadgen(cfg.duration+30*time.Second, args...)
	if err != nil {
		return measurement{}, err
	}
	return parseWrk(out, bodyBytes), nil
}

func wrkRanges(cfg *config, url string, size int64) (measurement, error) {
	script := filepath.Join(cfg.work, "ranges.lua")
	os.WriteFile(script, []byte(rangesLua), 0o644)
	out, err := loadgen(cfg.duration+30*time.Second, "wrk", "-t1", "-c64", "-d"+cfg.durationArg(), "--timeout", "10s",
		"--latency", "-s", script, url, "--", strconv.FormatInt(size, 10))
	if err != nil {
		return measurement{}, err
	}
	return parseWrk(out, 64<<10), nil
}

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSockErr = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkTotal   = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m),`)
)

func parseWrk(out string, bodyBytes int64) measurement {
	var m measurement
	if s := wrkRPS.FindStringSubmatch(out); s != nil {
		m.value, _ = strconv.ParseFloat(s[1], 64)
	}
	m.mbps = m.value * float64(bodyBytes) / 1e6
	for _, s := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(s[2], 64)
		switch s[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if s[1] == "50" {
			m.p50 = v
		} else {
			m.p99 = v
		}
	}
	if s := wrkNon2xx.FindStringSubmatch(out); s != nil {
		m.errors, _ = strconv.Atoi(s[1])
	}
	if s := wrkSockErr.FindStringSubmatch(out); s != nil {
		for _, n := range s[1:] {
			v, _ := strconv.Atoi(n)
			m.errors += v
		}
	}
	// Count only the successful responses: a server that answers fast
	// with errors must not look fast.
	if s := wrkTotal.FindStringSubmatch(out); s != nil && bodyBytes > 0 && m.errors > 0 {
		total, _ := strconv.ParseFloat(s[1], 64)
		secs, _ := strconv.ParseFloat(s[2], 64)
		switch s[3] {
		case "us":
			secs /= 1e6
		case "ms":
			secs /= 1e3
		case "m":
			secs *= 60
		}
		if secs > 0 {
			m.value = max(0, total-float64(m.errors)) / secs
			m.mbps = m.value * float64(bodyBytes) / 1e6
		}
	}
	return m
}

// curlStreams downloads url with n concurrent curl processes and returns
// the aggregate rate.
func curlStreams(cfg *config, n int, url string, insecure bool) (measurement, error) {
	args := []string{"curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"}
	if insecure {
		args = append(args, "-k", "--http1.1") // the benchmark's own local CA
	}
	args = append(args, url)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var firstErr error
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := loadgen(5*time.Minute, args...)
			mu.Lock()
			defer mu.Unlock()
			var code int
			var size int64
			fmt.Sscanf(out, "%d %d", &code, &size)
			if err == nil && (code != 200 || size != cfg.set.bigSize) {
				err = fmt.Errorf("curl %s: status %d, %d bytes", url, code, size)
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			total += size
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return measurement{}, firstErr
	}
	return measurement{value: float64(total) / secs / 1e9, mbps: float64(total) / secs / 1e6, bytes: float64(total)}, nil
}

var h2loadFinished = regexp.MustCompile(`finished in ([\d.]+)s, ([\d.]+) req/s, ([\d.]+)([KMG]?B)/s`)
var h2loadReqs = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

func h2loadRun(cfg *config, url string) (measurement, error) {
	n := cfg.h2Requests
	out, err := loadgen(2*time.Minute, "h2load", "-n", strconv.Itoa(n), "-c", "16", "-m", "10", url)
	if err != nil {
		return measurement{}, err
	}
	var m measurement
	if s := h2loadFinished.FindStringSubmatch(out); s != nil {
		m.value, _ = strconv.ParseFloat(s[2], 64)
		m.mbps = m.value * 1024 / 1e6
	}
	if s := h2loadReqs.FindStringSubmatch(out); s != nil {
		failed, _ := strconv.Atoi(s[5])
		errored, _ := strconv.Atoi(s[6])
		m.errors = failed + errored
	}
	return m, nil
}

// countSyscalls runs the load command while perf counts the server's
// syscalls, and returns syscalls per request.
func countSyscalls(cfg *config, s *server, load []string, requests int) (float64, error) {
	out := filepath.Join(cfg.work, "perf.out")
	perf := exec.Command("perf", "stat", "-e", "raw_syscalls:sys_enter", "-x", ",", "-o", out, "-p", strconv.Itoa(s.pid))
	if err := perf.Start(); err != nil {
		return 0, err
	}
	time.Sleep(300 * time.Millisecond) // let perf attach
	lout, lerr := loadgen(2*time.Minute, load...)
	perf.Process.Signal(syscall.SIGINT)
	perf.Wait()
	if lerr != nil {
		return 0, lerr
	}
	if load[0] == "wrk" {
		// wrk runs for a time, not a count: the requests it made.
		s := wrkTotal.FindStringSubmatch(lout)
		if s == nil {
			return 0, fmt.Errorf("wrk printed no request count: %s", lout)
		}
		requests, _ = strconv.Atoi(s[1])
		if requests == 0 {
			return 0, fmt.Errorf("wrk made no request: %s", lout)
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 2 && strings.Contains(line, "raw_syscalls:sys_enter") {
			n, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, fmt.Errorf("perf: %q", line)
			}
			return n / float64(requests), nil
		}
	}
	return 0, fmt.Errorf("perf printed no count: %s", raw)
}
