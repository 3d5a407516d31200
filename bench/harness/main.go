//go:build linux

// Command harness is the side-by-side benchmark behind bench/run: it
// starts flash_serve, file_server, Caddy's respond, nginx and lighttpd on
// 127.0.0.1, measures them interleaved, and writes a Markdown table and an
// SVG chart.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

type config struct {
	mode            string
	work, data      string
	caddy           string
	nginx, lighttpd string
	runs            int
	duration        time.Duration
	// runsSet and durationSet say that -runs and -duration were given.
	runsSet, durationSet bool
	// abuseOnly lists the scenarios of --abuse to run, by number.
	abuseOnly       map[string]bool
	restartWindow   time.Duration
	set             dataset
	syscallRequests int
	h2Requests      int
	only            map[string]bool
	out, svg        string
	command         string
}

func (c *config) durationArg() string { return fmt.Sprintf("%ds", int(c.duration.Seconds())) }

// result gathers every run of one workload on one server.
type result struct {
	runs     []measurement
	syscalls float64 // per request; 0 if not measured
	sysErr   string
	threads  int
	rssKB    int
	err      string
	// checked counts the runs whose data was checked resident before they
	// started; lowBefore is the lowest percentage found, lowAfter the
	// lowest after the files were read again; reread counts those runs.
	checked             int
	lowBefore, lowAfter float64
	reread              int
}

// noteResidency records one run's residency check.
func (r *result) noteResidency(before, after float64) {
	if r.checked == 0 {
		r.lowBefore, r.lowAfter = before, after
	}
	r.checked++
	r.lowBefore, r.lowAfter = min(r.lowBefore, before), min(r.lowAfter, after)
	if after != before {
		r.reread++
	}
}

// prepare gets one run of w on s ready: the page cache emptied for a cold
// workload, the data checked resident (and read again) for a warm one.
func prepare(cfg *config, w workload, s *server, r *result) error {
	if w.cold {
		if _, err := evict(cfg.data); err != nil {
			return fmt.Errorf("evicting: %w", err)
		}
		return nil
	}
	if len(w.resident) == 0 {
		return nil
	}
	before, after, err := ensureResident(cfg, w.resident)
	if err != nil {
		return fmt.Errorf("residency: %w", err)
	}
	r.noteResidency(before, after)
	if before < 100 {
		log.Printf("%s %s: data %.1f%% resident, %.1f%% after reading it again", w.id, s.name, before, after)
	}
	return nil
}

// timed runs w once on s and counts the server's CPU time during it.
func timed(cfg *config, w workload, s *server) (measurement, error) {
	cpu0, cerr := cpuSeconds(s.pid)
	m, err := w.run(cfg, s)
	if cpu1, cerr1 := cpuSeconds(s.pid); err == nil && cerr == nil && cerr1 == nil {
		m.cpuSecs = cpu1 - cpu0
	}
	return m, err
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	quick := flag.Bool("quick", false, "about 5 minutes: fewer and shorter runs")
	smoke := flag.Bool("smoke", false, "one request of every workload per server, small data; for CI")
	runs := flag.Int("runs", 0, "rounds of interleaved runs per workload, one run of each server a round "+
		"(medians and the median of the per-round ratios quoted); default 9, quick 3")
	dur := flag.Duration("duration", 0, "length of one timed run; default 5s, quick 1s")
	only := flag.String("workloads", "a,b,c,d,e,f,g,g2,h,i,j,k", "workloads to run; a letter also picks its variants (g: g and g2, h: h1 and h2)")
	out := flag.String("out", "", "Markdown output; default bench/RESULTS.md (smoke: bench/out/RESULTS-smoke.md)")
	keep := flag.Bool("keep", false, "keep the temporary folder")
	scale := flag.Bool("scale", false, "only the growth workload: a tree of -scale-files small files, each requested once, "+
		"as many missing paths, flash_serve's RSS after each pass, then e on that tree; writes its own section of the -out file")
	scaleFiles := flag.Int("scale-files", 1000000, "files of the -scale tree")
	scaleSize := flag.Int("scale-size", 8192, "bytes of each file of the -scale tree (1024 if the disk cannot hold those)")
	scaleDir := flag.String("scale-dir", "/var/tmp/flash-bench-scale", "where the -scale tree is created once and kept")
	scaleE := flag.Bool("scale-e", true, "with -scale: run e on the tree beside file_server and nginx after the growth passes "+
		"(3 rounds; each checks a million files resident: an hour on this VM); false stops after the passes")
	scaleTreeOnly := flag.Bool("scale-tree", false, "only create the -scale tree (disk work, no measurement: it needs no quiet machine) and stop")
	fetch := flag.String("fetch", "", "internal: request every path of this file once, print the result as JSON")
	fetchBase := flag.String("fetch-base", "", "internal: the URL -fetch's paths are appended to")
	fetchConns := flag.Int("fetch-conns", scaleConns, "internal: -fetch's connections")
	abuse := flag.Bool("abuse", false, "only the abuse suite (issue 29): stalled clients and cold probes, non-readers behind encode, "+
		"404 storms, reloads under load, a low descriptor limit, each beside file_server; writes its own section of the -out file "+
		"(with -smoke: a few clients of each, bench/out/RESULTS-abuse-smoke.md); -runs sets the storms' runs, -duration the short storm's length")
	abuseClientName := flag.String("abuse-client", "", "internal: run this client of the abuse suite, print its result as JSON")
	abuseSpec := flag.String("abuse-spec", "", "internal: the -abuse-client's spec, JSON")
	abuseOnly := flag.String("abuse-only", "1,2,3,4,5", "the scenarios of -abuse to run: 1 stalled clients, 2 encode, 3 404 storms, 4 reloads, 5 descriptor limit "+
		"(the section written holds only these)")
	flag.Parse()
	if *fetch != "" {
		runFetch(*fetch, *fetchBase, *fetchConns)
		return
	}
	if *abuseClientName != "" {
		abuseClient(*abuseClientName, *abuseSpec)
		return
	}

	cfg := &config{
		mode: "full", runs: 9, duration: 5 * time.Second, restartWindow: 10 * time.Second,
		set:             dataset{bigSize: 1 << 30, dirs: 100, perDir: 1000, manyFileSize: 8 << 10},
		syscallRequests: 20000, h2Requests: 100000,
		out: "bench/RESULTS.md", svg: "bench/results.svg",
		command: "bench/run " + strings.Join(os.Args[1:], " "),
	}
	switch {
	case *abuse && *smoke:
		cfg.mode, cfg.out = "abuse-smoke", "bench/out/RESULTS-abuse-smoke.md"
	case *abuse:
		cfg.mode = "abuse"
	case *smoke:
		cfg.mode, cfg.runs, cfg.restartWindow = "smoke", 1, time.Second
		cfg.set = dataset{bigSize: 16 << 20, dirs: 4, perDir: 50, manyFileSize: 8 << 10}
		cfg.out, cfg.svg = "bench/out/RESULTS-smoke.md", "bench/out/results-smoke.svg"
	case *quick:
		cfg.mode, cfg.runs, cfg.duration = "quick", 3, time.Second
		cfg.syscallRequests, cfg.h2Requests = 10000, 50000
	}
	if *runs > 0 {
		cfg.runs, cfg.runsSet = *runs, true
	}
	if *dur > 0 {
		cfg.duration, cfg.durationSet = *dur, true
	}
	if *out != "" {
		cfg.out = *out
		cfg.svg = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".svg"
	}
	cfg.abuseOnly = map[string]bool{}
	for _, n := range strings.Split(*abuseOnly, ",") {
		cfg.abuseOnly[strings.TrimSpace(n)] = true
	}
	cfg.only = map[string]bool{}
	for _, w := range strings.Split(*only, ",") {
		cfg.only[strings.TrimSpace(w)] = true
	}
	if runtime.NumCPU() < 2 {
		log.Fatal("needs 2 CPUs: one for the servers, one for the load")
	}
	raiseNoFile()

	var err error
	cfg.work, err = os.MkdirTemp("", "flash-bench-")
	if err != nil {
		log.Fatal(err)
	}
	if !*keep {
		defer os.RemoveAll(cfg.work)
	}
	cfg.data = filepath.Join(cfg.work, "data")
	os.MkdirAll(cfg.data, 0o755)
	do := run
	if *abuse {
		do = runAbuse
	}
	if *scale || *scaleTreeOnly {
		cfg.mode = "scale"
		do = func(cfg *config) error {
			return runScale(cfg, *scaleDir, *scaleFiles, *scaleSize, *scaleTreeOnly, *scaleE)
		}
	}
	err = do(cfg)
	if *keep {
		log.Printf("kept %s (bench/profile reads it)", cfg.work)
	}
	if err != nil {
		log.Print(err)
		if !*keep {
			os.RemoveAll(cfg.work)
		}
		os.Exit(1)
	}
}

func run(cfg *config) error {
	if err := portsFree(portFlash, portFile, portResp, portRespHdr, portResp404, portErr404, portResp8k, portNginx, portNgxAio, portLighty, tlsFlash, tlsFile, portRestart); err != nil {
		return err
	}
	log.Printf("building ./xcaddy")
	if err := buildCaddy(cfg); err != nil {
		return err
	}
	log.Printf("writing data sets under %s", cfg.data)
	start := time.Now()
	if err := makeData(cfg.data, cfg.set); err != nil {
		return err
	}
	if err := writeURIs(filepath.Join(cfg.work, "many.uris"), cfg.set, 50000, false, 1); err != nil {
		return err
	}
	if err := writeURIs(filepath.Join(cfg.work, "missing.uris"), cfg.set, 50000, true, 2); err != nil {
		return err
	}
	log.Printf("data written in %s", time.Since(start).Round(time.Second))

	servers, err := startServers(cfg)
	defer func() { stopServers(servers) }()
	if err != nil {
		return err
	}
	var names []string
	for _, s := range servers {
		names = append(names, s.name)
	}
	results := map[string]map[string]*result{}
	var ran []workload
	for _, w := range workloads(cfg) {
		if !cfg.only[w.id] && !cfg.only[w.id[:1]] {
			continue
		}
		ran = append(ran, w)
		results[w.id] = map[string]*result{}
		if cfg.mode == "smoke" {
			smokeWorkload(cfg, w, servers, results[w.id])
			continue
		}
		measureWorkload(cfg, w, servers, results[w.id])
	}
	if cfg.only["j"] {
		w := workload{id: "j", title: fmt.Sprintf("restart on a cold page cache: first %s of e", cfg.restartWindow), unit: "req/s", cpuPerGiB: true}
		ran = append(ran, w)
		results["j"] = map[string]*result{}
		stopServers(servers) // j starts its own, one at a time, on the cold cache
		servers = nil
		measureRestart(cfg, results["j"])
	}
	if cfg.only["k"] {
		w := workload{id: "k", title: fmt.Sprintf("reading the cold tree of %d files", cfg.set.manyCount()), unit: "MB/s"}
		ran = append(ran, w)
		results["k"] = map[string]*result{}
		measurePrewarmThroughput(cfg, results["k"])
	}
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	md := report(cfg, ran, names, results)
	// The sections --scale and --abuse wrote, and the stalled-client
	// figures of #29, stay.
	for _, heading := range []string{"## Stalled clients", abuseHeading, growthHeading} {
		if kept := keptSection(cfg.out, heading); kept != "" {
			md = strings.TrimRight(md, "\n") + "\n\n" + kept
		}
	}
	if err := os.WriteFile(cfg.out, []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.svg, []byte(chart(cfg, ran, names, results)), 0o644); err != nil {
		return err
	}
	// The README's chart: the headline ratios, beside the full chart.
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg.svg), "ratios.svg"), []byte(ratioChart(cfg, results)), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	log.Printf("wrote %s and %s", cfg.out, cfg.svg)
	if cfg.mode == "smoke" {
		for _, w := range ran {
			for name, r := range results[w.id] {
				if r.err != "" {
					return fmt.Errorf("smoke: %s on %s: %s", w.id, name, r.err)
				}
			}
		}
	}
	return nil
}

// buildCaddy builds ./xcaddy into the work folder and finds the other
// servers.
func buildCaddy(cfg *config) error {
	cfg.caddy = filepath.Join(cfg.work, "caddy")
	if out, err := exec.Command("go", "build", "-o", cfg.caddy, "./xcaddy").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./xcaddy: %v\n%s", err, out)
	}
	cfg.nginx = lookPath("nginx")
	cfg.lighttpd = lookPath("lighttpd")
	return nil
}

// measureWorkload runs w on every server, interleaved, each round starting
// one server further (A B C, B C A, C A B …) so that no server always runs
// first or right after the same one, then counts syscalls once per server.
func measureWorkload(cfg *config, w workload, servers []*server, res map[string]*result) {
	for round := 1; round <= cfg.runs; round++ {
		for i := range servers {
			s := servers[(i+round-1)%len(servers)]
			if !s.takes(w.id) {
				continue
			}
			r := res[s.name]
			if r == nil {
				r = &result{}
				res[s.name] = r
			}
			if err := prepare(cfg, w, s, r); err != nil {
				r.err = firstLine(err.Error())
				log.Printf("%s %s run %d: %v", w.id, s.name, round, err)
				continue
			}
			smp := sample(s.pid)
			m, err := timed(cfg, w, s)
			th, kb := smp.finish()
			r.threads, r.rssKB = max(r.threads, th), max(r.rssKB, kb)
			if err != nil {
				r.err = firstLine(err.Error())
				log.Printf("%s %s run %d: %v", w.id, s.name, round, err)
				continue
			}
			m.round = round
			r.runs = append(r.runs, m)
			log.Printf("%-2s %-12s run %d: %10.2f %s  p50 %.2fms p99 %.2fms errors %d",
				w.id, s.name, round, m.value, w.unit, m.p50, m.p99, m.errors)
		}
	}
	if w.syscalls == nil {
		return
	}
	for _, s := range servers {
		r := res[s.name]
		if r == nil {
			continue
		}
		n, err := countSyscalls(cfg, s, w.syscalls(cfg, s), cfg.syscallRequests)
		if err != nil {
			r.sysErr = firstLine(err.Error())
			log.Printf("%s %s syscalls: %v", w.id, s.name, err)
			continue
		}
		r.syscalls = n
	}
}

// smokeWorkload checks that every server answers one request of w, with
// the load generator the workload uses, but no timing.
func smokeWorkload(cfg *config, w workload, servers []*server, res map[string]*result) {
	saved := cfg.duration
	cfg.duration = time.Second
	defer func() { cfg.duration = saved }()
	for _, s := range servers {
		if !s.takes(w.id) {
			continue
		}
		r := &result{}
		res[s.name] = r
		if err := prepare(cfg, w, s, r); err != nil {
			r.err = firstLine(err.Error())
			continue
		}
		m, err := timed(cfg, w, s)
		if err != nil {
			r.err = firstLine(err.Error())
			continue
		}
		if m.value <= 0 {
			r.err = "no successful request"
			continue
		}
		if m.errors > 0 {
			r.err = fmt.Sprintf("%d failed requests", m.errors)
		}
		m.round = 1
		r.runs = append(r.runs, m)
		r.threads, r.rssKB = procStatus(s.pid)
	}
}

func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	log.Printf("%s not found: it is left out", name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// noFile is the RLIMIT_NOFILE every server runs with.
var noFile uint64

// raiseNoFile gives the servers (which inherit it) a descriptor limit of
// 2^20 where it can be raised that far (as root), so that a tree of 100,000
// files is not measured against an fd table that is too small.
func raiseNoFile() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	want := uint64(1 << 20)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(want, lim.Max)}); err != nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	noFile = lim.Cur
	log.Printf("RLIMIT_NOFILE for the servers: %d", noFile)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuPerGiB is the median server CPU seconds per GiB of body, over the
// runs that counted both; 0 if none did.
func (r *result) cpuPerGiB() float64 {
	var xs []float64
	for _, m := range r.runs {
		if m.bytes > 0 && m.cpuSecs > 0 {
			xs = append(xs, m.cpuSecs/(m.bytes/(1<<30)))
		}
	}
	return median(xs)
}

func (r *result) median(f func(measurement) float64) float64 {
	xs := make([]float64, len(r.runs))
	for i, m := range r.runs {
		xs[i] = f(m)
	}
	return median(xs)
}

// spread is (max-min)/median of the primary figure, in percent: how noisy
// the workload was.
func (r *result) spread() float64 {
	if len(r.runs) < 2 {
		return 0
	}
	lo, hi := r.runs[0].value, r.runs[0].value
	for _, m := range r.runs {
		lo, hi = min(lo, m.value), max(hi, m.value)
	}
	med := r.median(func(m measurement) float64 { return m.value })
	if med == 0 {
		return 0
	}
	return 100 * (hi - lo) / med
}
