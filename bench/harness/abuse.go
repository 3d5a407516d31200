//go:build linux

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// bench/run --abuse: the abuse suite of issue 29 ("Hostile traffic cannot
// take the fast path down"). Each scenario runs against flash_serve and
// file_server (and Caddy's respond 404 for the 404 storms), one fresh
// Caddy process at a time, pinned to CPU 0, the clients on CPU 1:
//
//  1. stalled clients and cold probes: HTTP/2 streams at a zero window on
//     cold ranges, HTTP/1.1 clients that never read, cold probes timed
//     beside them, and the server's RSS;
//  2. non-readers behind encode gzip, and the RSS they add;
//  3. 404 storms of distinct deep and distinct short missing paths (wrk
//     with a Lua script that makes a new path for each request), servers
//     interleaved round by round;
//  4. config reloads through the admin API alternating each cache setting
//     under HTTP/1.1 and h2c load;
//  5. the server started with RLIMIT_NOFILE 90, directory and file
//     requests from many connections.
//
// The tests assert the behaviour (TestColdProbeAnsweredWhileClientsStall,
// TestNonReadersBehindEncodeHoldLittle, TestDeepMissingPathsMakeOneNodeEach,
// TestReloadsChangingEachSettingAnswerNo5xx, TestFDExhaustionWithIndexFiles);
// this writes the figures beside file_server's to the "Abuse suite"
// section of bench/RESULTS.md, each against its goal.

const abuseHeading = "## Abuse suite"

const (
	portAbuseRing    = 18091 // stall: the HTTP/1.1 non-readers' site
	portAbuseEncode  = 18092
	portAbuseSecond  = 18093 // reloads: the second site sharing the cache
	portAbuseAdmin   = 18097
	abuseDirs        = 100 // the short storm's existing directories
	abuseFDDirs      = 150
	abuseFDFileSize  = 128 << 10
	abuseFDRcvBuf    = 8 << 10
	coldBudgetMiB    = 64 // docs/security.md: the cold-read budget
	extraPerStallKiB = 96 // docs/engines.md: a 64 KiB buffer where file_server's is 32 KiB, and 64 KiB gathered on HTTP/1.x
)

// abuseCounts sizes the scenarios: the for a real run, a few of
// each for --smoke.
type abuseCounts struct {
	streams, readers, rounds int // 1
	encodeReaders            int // 2
	deep, short, perf        time.Duration
	stormRuns                int // 3
	reloads                  int // 4
	fdLimit, fdConns, fdReqs int // 5
	// settle is how long a fresh server idles before its RSS is read,
	// and how long the stalled clients are left before it is read again.
	settle time.Duration
	// smoke: the storms' one run is also the one perf counts syscalls
	// over (a separate run for perf keeps its cost out of the rates).
	smoke bool
}

func abuseCountsFor(cfg *config) abuseCounts {
	if cfg.mode == "abuse-smoke" {
		return abuseCounts{streams: 20, readers: 20, rounds: 2, encodeReaders: 40,
			deep: time.Second, short: time.Second, perf: time.Second, stormRuns: 1, smoke: true,
			reloads: 4, fdLimit: 90, fdConns: 64, fdReqs: 500, settle: 100 * time.Millisecond}
	}
	c := abuseCounts{streams: 300, readers: 300, rounds: 50, encodeReaders: 800,
		deep: 20 * time.Second, short: 10 * time.Second, perf: 5 * time.Second, stormRuns: 3,
		reloads: 60, fdLimit: 90, fdConns: 70, fdReqs: 10000, settle: time.Second}
	if cfg.runsSet {
		c.stormRuns = cfg.runs
	}
	if cfg.durationSet {
		c.short = cfg.duration
	}
	return c
}

// abuseRow is one line of the section's table.
type abuseRow struct {
	scenario, server, figures, goal, met string
}

// abuseSite is one site of an abuse server's Caddyfile.
type abuseSite struct {
	port  int
	root  string
	lines []string
}

// handlerBlock is the handler's directive with options, nested.
func handlerBlock(handler string, options ...string) string {
	if len(options) == 0 {
		return handler
	}
	return handler + " {\n\t\t" + strings.Join(options, "\n\t\t") + "\n\t}"
}

// abuseCaddyfile is one abuse server's config: cleartext HTTP/1.1 and h2c,
// flash_serve's listener wrapper for flash_serve (as its README says), the
// admin API at admin ("" for none).
func abuseCaddyfile(cfg *config, handler, admin string, sites ...abuseSite) string {
	var b strings.Builder
	if admin == "" {
		admin = "off"
	}
	fmt.Fprintf(&b, "{\n\tadmin %s\n\tpersist_config off\n\tstorage file_system %s\n\tlog {\n\t\tlevel ERROR\n\t}\n\tservers {\n\t\tprotocols h1 h2c\n",
		admin, filepath.Join(cfg.work, "caddydata-abuse"))
	if handler == "flash_serve" {
		b.WriteString("\t\tlistener_wrappers {\n\t\t\tflash_serve\n\t\t}\n")
	}
	b.WriteString("\t}\n}\n")
	for _, s := range sites {
		fmt.Fprintf(&b, "http://127.0.0.1:%d {\n\tbind 127.0.0.1\n", s.port)
		if s.root != "" {
			fmt.Fprintf(&b, "\troot * %s\n", s.root)
		}
		for _, l := range s.lines {
			b.WriteString("\t" + l + "\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// startAbuse starts one server from a Caddyfile (or a JSON config, by its
// name), pinned to CPU 0, with prefix before the caddy command (prlimit),
// and waits until it answers /1k.bin on port.
func startAbuse(cfg *config, name, text string, port int, prefix ...string) (*server, error) {
	ext := ".Caddyfile"
	if strings.HasPrefix(text, "{\"") {
		ext = ".json"
	}
	conf := filepath.Join(cfg.work, "abuse-"+name+ext)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	args := append(prefix, cfg.caddy, "run", "--config", conf)
	if ext == ".Caddyfile" {
		args = append(args, "--adapter", "caddyfile")
	}
	servers, err := launch(cfg, []serverSpec{{&server{name: name, port: port}, args}})
	if err != nil {
		stopServers(servers)
		return nil, err
	}
	return servers[0], nil
}

// abuseData writes every scenario's files under cfg.data/abuse.
type abuseData struct {
	stall, www, reload, fd string
	reloadPaths, fdPaths   []string
}

func writeAbuseData(cfg *config, c abuseCounts) (*abuseData, error) {
	base := filepath.Join(cfg.data, "abuse")
	d := &abuseData{stall: filepath.Join(base, "stall"), www: filepath.Join(base, "www"),
		reload: filepath.Join(base, "reload"), fd: filepath.Join(base, "fd")}
	rng := rand.New(rand.NewPCG(29, 1))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	files := map[string][]byte{}
	add := func(dir, name string, body []byte) { files[filepath.Join(dir, filepath.FromSlash(name))] = body }
	for _, dir := range []string{d.stall, d.www, d.reload, d.fd} {
		add(dir, "1k.bin", random(1024))
	}
	add(d.stall, "stall.bin", random(max(1, c.streams)*stallSpacing))
	add(d.stall, "ring.bin", random(1<<20))
	add(d.stall, "probe16k.bin", random(16<<10))
	add(d.stall, "probe8m.bin", random(8<<20))
	for i := range abuseDirs {
		for j := range 10 {
			add(d.www, fmt.Sprintf("d%03d/f%d.html", i, j), []byte(fmt.Sprintf("<p>%d %d</p>\n", i, j)))
		}
	}
	// The reload tree (as TestReloadsChangingEachSettingAnswerNo5xx's): a
	// body from memory, by sendfile, through the ring, an index file, a
	// precompressed sidecar and an ETag file, and many distinct files.
	reloadFiles := map[string][]byte{
		"small.txt": []byte("small and in memory\n"), "mid.bin": random(128 << 10), "big.bin": random(2 << 20),
		"dir/index.html": []byte("<p>the index</p>\n"), "page.txt": bytes.Repeat([]byte("a page that has a gzip sidecar\n"), 200),
		"other/sub/deep": []byte("deep\n"), "page.txt.etag": []byte(`"page-etag"`),
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(reloadFiles["page.txt"])
	zw.Close()
	reloadFiles["page.txt.gz"] = gz.Bytes()
	for name, b := range reloadFiles {
		add(d.reload, name, b)
	}
	for _, p := range []string{"/small.txt", "/mid.bin", "/big.bin", "/dir/", "/page.txt", "/other/sub/deep"} {
		d.reloadPaths = append(d.reloadPaths, p, p) // the named files twice as often
	}
	for i := range 200 {
		name := fmt.Sprintf("many/f%03d.txt", i)
		add(d.reload, name, []byte(strings.Repeat(strconv.Itoa(i), 50)))
		d.reloadPaths = append(d.reloadPaths, "/"+name)
	}
	// The descriptor-limit tree (as TestFDExhaustionWithIndexFiles's):
	// directories whose index is index.html or the second index name,
	// index.txt, and files of abuseFDFileSize, which a client with a small
	// receive buffer takes a while to read: each answer holds its
	// descriptor meanwhile.
	for i := range abuseFDDirs {
		index := "index.html"
		if i%3 == 1 {
			index = "index.txt"
		}
		add(d.fd, fmt.Sprintf("d%03d/%s", i, index), []byte(fmt.Sprintf("<p>page %d</p>\n", i)))
		add(d.fd, fmt.Sprintf("f%03d.bin", i), random(abuseFDFileSize))
		d.fdPaths = append(d.fdPaths, fmt.Sprintf("/d%03d/", i), fmt.Sprintf("/f%03d.bin", i))
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// runAbuse is bench/run --abuse.
func runAbuse(cfg *config) error {
	if err := portsFree(portFlash, portAbuseRing, portAbuseEncode, portAbuseSecond, portAbuseAdmin); err != nil {
		return err
	}
	start, loadStart := time.Now(), loadAverage()
	log.Printf("building ./xcaddy")
	if err := buildCaddy(cfg); err != nil {
		return err
	}
	c := abuseCountsFor(cfg)
	data, err := writeAbuseData(cfg, c)
	if err != nil {
		return err
	}
	var rows []abuseRow
	var failed []string
	for i, sc := range []struct {
		name string
		run  func(*config, abuseCounts, *abuseData) ([]abuseRow, error)
	}{
		{"stalled clients", abuseStall},
		{"non-readers behind encode", abuseEncode},
		{"404 storms", abuseStorms},
		{"reloads", abuseReloads},
		{"descriptor limit", abuseFDLimit},
	} {
		if !cfg.abuseOnly[strconv.Itoa(i+1)] {
			continue
		}
		log.Printf("abuse: %s", sc.name)
		t0 := time.Now()
		r, err := sc.run(cfg, c, data)
		log.Printf("abuse: %s took %s", sc.name, time.Since(t0).Round(100*time.Millisecond))
		rows = append(rows, r...)
		if err != nil {
			log.Printf("abuse: %s: %v", sc.name, err)
			rows = append(rows, abuseRow{scenario: sc.name, server: "–", figures: "did not run: " + firstLine(err.Error()), goal: "–", met: "no"})
			failed = append(failed, sc.name)
		}
	}
	section := abuseMarkdown(cfg, c, rows, time.Since(start), loadStart)
	fmt.Print(section)
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	old, _ := os.ReadFile(cfg.out)
	if err := os.WriteFile(cfg.out, []byte(replaceSection(string(old), abuseHeading, section)), 0o644); err != nil {
		return err
	}
	log.Printf("wrote the abuse section of %s in %s", cfg.out, time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("abuse: %s did not run", strings.Join(failed, ", "))
	}
	return nil
}

// secs writes d as "1 s", "0.1 s".
func secs(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }

// mb is KiB as MB (10^6 bytes), the unit.
func mb(kib int) float64 { return float64(kib) * 1024 / 1e6 }

func metIf(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// 1. Stalled clients and cold probes.
func abuseStall(cfg *config, c abuseCounts, d *abuseData) ([]abuseRow, error) {
	probes := []string{"/probe16k.bin", "/probe8m.bin"}
	results := map[string]stallResult{}
	for _, h := range []string{"flash_serve", "file_server"} {
		ring := handlerBlock(h)
		if h == "flash_serve" {
			// Every read of the non-readers' body through the ring: the
			// cold-read budget's worst case.
			ring = handlerBlock(h, "transmit io_uring")
		}
		text := abuseCaddyfile(cfg, h, "", abuseSite{portFlash, d.stall, []string{handlerBlock(h)}},
			abuseSite{portAbuseRing, d.stall, []string{ring}})
		s, err := startAbuse(cfg, "stall-"+h, text, portFlash)
		if err != nil {
			return nil, err
		}
		// The files' descriptors belong in the idle figure: HEAD each on
		// both sites (the client evicts what that read).
		for _, port := range []int{portFlash, portAbuseRing} {
			for _, f := range []string{"/stall.bin", "/ring.bin", "/probe16k.bin", "/probe8m.bin"} {
				exec.Command("curl", "-s", "-o", "/dev/null", "-I", fmt.Sprintf("http://127.0.0.1:%d%s", port, f)).Run()
			}
		}
		time.Sleep(c.settle)
		var res stallResult
		err = runAbuseClient(5*time.Minute, "stall", stallSpec{
			Auto: fmt.Sprintf("127.0.0.1:%d", portFlash), Ring: fmt.Sprintf("127.0.0.1:%d", portAbuseRing), Root: d.stall,
			Streams: c.streams, Readers: c.readers, Probes: probes, Rounds: c.rounds, PID: s.pid, Settle: c.settle,
		}, &res)
		stopServers([]*server{s})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h, err)
		}
		results[h] = res
		log.Printf("abuse: stall %s: %+v", h, res)
	}
	title := fmt.Sprintf("1. %d zero-window h2 streams + %d h1 non-readers on cold data", c.streams, c.readers)
	var rows []abuseRow
	fsGrowth := results["file_server"].RSSStalledKB - results["file_server"].RSSIdleKB
	// What docs/engines.md lets a stalled HTTP/1.1 response hold beyond
	// file_server's (an HTTP/2 one holds the same 32 KiB copy buffer), and
	// the cold-read budget's buffers.
	bound := fsGrowth + coldBudgetMiB<<10 + c.readers*extraPerStallKiB
	for _, h := range []string{"flash_serve", "file_server"} {
		r := results[h]
		var parts []string
		failures, p99small := 0, 0.0
		for _, p := range r.Probes {
			parts = append(parts, fmt.Sprintf("%s %s %.1f / %.1f ms", sizeOfProbe(p.Path), p.Proto, p.P50, p.P99))
			failures += p.Failures
			if p.Path == "/probe16k.bin" {
				p99small = max(p99small, p.P99)
			}
		}
		fig := fmt.Sprintf("begun: h2 %d/%d, h1 %d/%d; cold probes p50 / p99: %s; failed %d of %d",
			r.H2Begun, c.streams, r.H1Begun, c.readers, strings.Join(parts, ", "), failures, len(r.Probes)*c.rounds)
		for _, p := range r.Probes {
			if p.FirstError != "" {
				fig += fmt.Sprintf(" (%s %s: %s)", p.Path, p.Proto, p.FirstError)
				break
			}
		}
		ok := failures == 0 && p99small < 100 && len(r.Probes) == 4
		goal := "every probe answered whole; 16 KiB p99 < 100 ms"
		met := metIf(ok)
		if h != "flash_serve" {
			met = "control: " + met
		}
		rows = append(rows, abuseRow{title + ": cold probes (16 KiB, 8 MiB; h1, h2)", h, fig, goal, met})
		growth := r.RSSStalledKB - r.RSSIdleKB
		fig = fmt.Sprintf("RSS %.0f → %.0f MB (+%.0f), peak %.0f MB", mb(r.RSSIdleKB), mb(r.RSSStalledKB), mb(growth), mb(r.RSSPeakKB))
		goal, met = "control", "–"
		if h == "flash_serve" {
			goal = fmt.Sprintf("growth ≤ file_server's (%.0f MB) + the cold budget (64 MiB) + %d KiB per stalled h1 response = %.0f MB",
				mb(fsGrowth), extraPerStallKiB, mb(bound))
			met = metIf(growth <= bound)
		}
		rows = append(rows, abuseRow{title + ": RSS", h, fig, goal, met})
	}
	return rows, nil
}

func sizeOfProbe(path string) string {
	switch path {
	case "/probe16k.bin":
		return "16 KiB"
	case "/probe8m.bin":
		return "8 MiB"
	}
	return path
}

// 2. Non-readers behind encode gzip.
func abuseEncode(cfg *config, c abuseCounts, d *abuseData) ([]abuseRow, error) {
	results := map[string]encodeResult{}
	for _, h := range []string{"flash_serve", "file_server"} {
		hb := handlerBlock(h)
		if h == "flash_serve" {
			hb = handlerBlock(h, "transmit io_uring")
		}
		text := abuseCaddyfile(cfg, h, "", abuseSite{portAbuseEncode, d.stall, []string{"encode gzip", hb}})
		s, err := startAbuse(cfg, "encode-"+h, text, portAbuseEncode)
		if err != nil {
			return nil, err
		}
		exec.Command("curl", "-s", "-o", "/dev/null", "-I", fmt.Sprintf("http://127.0.0.1:%d/probe8m.bin", portAbuseEncode)).Run()
		time.Sleep(c.settle)
		var res encodeResult
		err = runAbuseClient(5*time.Minute, "encode", encodeSpec{Addr: fmt.Sprintf("127.0.0.1:%d", portAbuseEncode),
			Path: "/probe8m.bin", File: filepath.Join(d.stall, "probe8m.bin"), N: c.encodeReaders, PID: s.pid, Settle: 2 * c.settle}, &res)
		stopServers([]*server{s})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h, err)
		}
		results[h] = res
		log.Printf("abuse: encode %s: %+v", h, res)
	}
	title := fmt.Sprintf("2. %d h1 non-readers of a cold 8 MiB file behind `encode gzip`", c.encodeReaders)
	fs := results["file_server"]
	fsGrowth := fs.RSSAfterKB - fs.RSSBeforeKB
	var rows []abuseRow
	for _, h := range []string{"flash_serve", "file_server"} {
		r := results[h]
		growth := r.RSSAfterKB - r.RSSBeforeKB
		fig := fmt.Sprintf("begun %d/%d; RSS %.0f → %.0f MB (+%.0f), peak %.0f MB", r.Started, c.encodeReaders,
			mb(r.RSSBeforeKB), mb(r.RSSAfterKB), mb(growth), mb(r.PeakKB))
		goal, met := "control", "–"
		if h == "flash_serve" {
			limit := fsGrowth + coldBudgetMiB<<10*11/10
			goal = fmt.Sprintf("growth ≤ file_server's (%.0f MB) + the cold budget + 10 %% (70.4 MiB) = %.0f MB", mb(fsGrowth), mb(limit))
			met = metIf(growth <= limit && r.Started == c.encodeReaders)
		}
		rows = append(rows, abuseRow{title + ": RSS growth", h, fig, goal, met})
	}
	return rows, nil
}

// The storms' wrk scripts: a new path for each request (a per-run tag and
// a counter), and a count of the answers that are not 404, so that a
// server answering errors fast does not look fast.
const stormLuaCommon = `other = 0
local threads = {}
local n = 0
function setup(thread) table.insert(threads, thread) end
function response(status, headers, body)
  if status ~= 404 then other = other + 1 end
end
function done(summary, latency, requests)
  local o = 0
  for _, t in ipairs(threads) do o = o + t:get("other") end
  io.write("answers other than 404: " .. o .. "\n")
end
`

// deepLua asks /nx<tag>x<n>/ and 380 levels of abcdefgh below it: a new
// missing directory at the root for each request, 3.4 KB deep.
const deepLua = stormLuaCommon + `local seg = string.rep("abcdefgh/", 380)
local tag = ""
function init(args) tag = args[1] end
function request()
  n = n + 1
  return wrk.format("GET", "/nx" .. tag .. "x" .. n .. "/" .. seg .. "f.html")
end
`

// shortLua asks a new short name in one of the existing directories
// d000…d<dirs-1>, in turn.
const shortLua = stormLuaCommon + `local tag = ""
local dirs = 1
function init(args) tag = args[1]; dirs = tonumber(args[2]) end
function request()
  n = n + 1
  return wrk.format("GET", string.format("/d%03d/%sr%d.html", n % dirs, tag, n))
end
`

var wrkOther = regexp.MustCompile(`answers other than 404: (\d+)`)

// stormRun is one run of a storm on one server.
type stormRun struct {
	rps, cpuUSPerReq float64
	growthKB         int
	other, sockErrs  int
	requests         float64
}

// stormWrk runs wrk with script for d against port and returns the rate
// of 404s, the requests sent and the answers that were not 404s.
func stormWrk(cfg *config, script string, d time.Duration, port int, args ...string) (stormRun, error) {
	wargs := []string{"wrk", "-t1", "-c64", fmt.Sprintf("-d%ds", max(1, int(d.Seconds()))), "--timeout", "10s", "-s", script,
		fmt.Sprintf("http://127.0.0.1:%d", port), "--"}
	out, err := loadgen(d+60*time.Second, append(wargs, args...)...)
	if err != nil {
		return stormRun{}, err
	}
	var r stormRun
	if s := wrkRPS.FindStringSubmatch(out); s != nil {
		r.rps, _ = strconv.ParseFloat(s[1], 64)
	}
	if s := wrkTotal.FindStringSubmatch(out); s != nil {
		r.requests, _ = strconv.ParseFloat(s[1], 64)
	}
	if s := wrkOther.FindStringSubmatch(out); s != nil {
		r.other, _ = strconv.Atoi(s[1])
	}
	if s := wrkSockErr.FindStringSubmatch(out); s != nil {
		for _, n := range s[1:] {
			v, _ := strconv.Atoi(n)
			r.sockErrs += v
		}
	}
	if r.requests > 0 {
		r.rps *= max(0, r.requests-float64(r.other)) / r.requests
	}
	if r.rps == 0 {
		return r, fmt.Errorf("wrk: no requests: %s", out)
	}
	return r, nil
}

// stormServer is one server of the storms: its Caddyfile.
type stormServer struct{ name, text string }

// 3. Distinct deep and distinct short 404 storms.
func abuseStorms(cfg *config, c abuseCounts, d *abuseData) ([]abuseRow, error) {
	deep, short := filepath.Join(cfg.work, "deep.lua"), filepath.Join(cfg.work, "short.lua")
	if err := os.WriteFile(deep, []byte(deepLua), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(short, []byte(shortLua), 0o644); err != nil {
		return nil, err
	}
	servers := []stormServer{
		{"flash_serve", abuseCaddyfile(cfg, "flash_serve", "", abuseSite{portFlash, d.www, []string{"flash_serve"}})},
		{"file_server", abuseCaddyfile(cfg, "file_server", "", abuseSite{portFlash, d.www, []string{"file_server"}})},
		{"respond_404", abuseCaddyfile(cfg, "respond_404", "", abuseSite{portFlash, d.www, []string{"respond 404"}})},
	}
	var rows []abuseRow
	for _, st := range []struct {
		title, id, script string
		dur               time.Duration
		args              func(tag string) []string
	}{
		{fmt.Sprintf("3a. distinct deep missing paths (`/nxN/` + 380 × `abcdefgh/` + `f.html`, each new), wrk -c64 %s", secs(c.deep)), "deep", deep, c.deep,
			func(tag string) []string { return []string{tag} }},
		{fmt.Sprintf("3b. distinct short missing names in %d existing directories, wrk -c64 %s", abuseDirs, secs(c.short)), "short", short, c.short,
			func(tag string) []string { return []string{tag, strconv.Itoa(abuseDirs)} }},
	} {
		runs := map[string][]stormRun{}
		sys := map[string]string{}
		for round := 1; round <= c.stormRuns; round++ {
			for i, sv := range servers {
				// In a smoke run perf counts over the one run.
				r, perSys, err := stormOnce(cfg, c, sv, st.script, st.dur, c.smoke, st.args(fmt.Sprintf("%s%d%d%d", st.id, round, i, rand.IntN(1e6))))
				if err != nil {
					return rows, fmt.Errorf("%s on %s: %w", st.id, sv.name, err)
				}
				if c.smoke {
					sys[sv.name] = perSys
				}
				runs[sv.name] = append(runs[sv.name], r)
				log.Printf("abuse: %-5s %-12s run %d: %8.0f req/s, %.1f µs CPU/req, RSS +%.1f MB, %d not 404, %d socket errors",
					st.id, sv.name, round, r.rps, r.cpuUSPerReq, mb(r.growthKB), r.other, r.sockErrs)
			}
		}
		// Syscalls per request: perf on the server over a run of its own
		// (perf slows the server; the rates above are without it).
		for i, sv := range servers {
			if c.smoke {
				break
			}
			_, perSys, err := stormOnce(cfg, c, sv, st.script, c.perf, true, st.args(fmt.Sprintf("%sp%d%d", st.id, i, rand.IntN(1e6))))
			if err != nil {
				return rows, fmt.Errorf("%s on %s: %w", st.id, sv.name, err)
			}
			sys[sv.name] = perSys
		}
		med := func(name string, f func(stormRun) float64) float64 {
			var xs []float64
			for _, r := range runs[name] {
				xs = append(xs, f(r))
			}
			return median(xs)
		}
		rps := func(name string) float64 { return med(name, func(r stormRun) float64 { return r.rps }) }
		for _, sv := range servers {
			rs := runs[sv.name]
			growth, other, sock := 0, 0, 0
			var each []string
			for _, r := range rs {
				growth = max(growth, r.growthKB)
				other += r.other
				sock += r.sockErrs
				each = append(each, fmtValue(r.rps, "req/s"))
			}
			fig := fmt.Sprintf("%s req/s (runs %s), %.1f µs CPU/req, %s syscalls/req, RSS growth ≤ %.1f MB",
				fmtValue(rps(sv.name), "req/s"), strings.Join(each, ", "), med(sv.name, func(r stormRun) float64 { return r.cpuUSPerReq }), sys[sv.name], mb(growth))
			if other > 0 || sock > 0 {
				fig += fmt.Sprintf("; %d answers not 404, %d socket errors", other, sock)
			}
			goal, met := "control", "–"
			if sv.name == "flash_serve" {
				fsRatio, rRatio := rps("flash_serve")/rps("file_server"), rps("flash_serve")/rps("respond_404")
				fig += fmt.Sprintf("; %.3f× file_server, %.3f× respond 404", fsRatio, rRatio)
				if st.id == "deep" {
					goal = "≥ 1.0× file_server's req/s; RSS growth ≤ 50 MB"
					met = metIf(fsRatio >= 1.0 && mb(growth) <= 50 && other == 0)
				} else {
					goal = "≥ 1.2× file_server's req/s and ≥ 0.9× respond 404's"
					met = metIf(fsRatio >= 1.2 && rRatio >= 0.9 && other == 0)
				}
			}
			rows = append(rows, abuseRow{st.title, sv.name, fig, goal, met})
		}
	}
	return rows, nil
}

// stormOnce starts sv, lets it settle, runs one storm of d against it
// (with perf counting its syscalls if withPerf: their number per request,
// or why not) and stops it.
func stormOnce(cfg *config, c abuseCounts, sv stormServer, script string, d time.Duration, withPerf bool, args []string) (stormRun, string, error) {
	s, err := startAbuse(cfg, "storm-"+sv.name, sv.text, portFlash)
	if err != nil {
		return stormRun{}, "", err
	}
	defer stopServers([]*server{s})
	time.Sleep(c.settle)
	_, rss0 := procStatus(s.pid)
	smp := sample(s.pid)
	cpu0, _ := cpuSeconds(s.pid)
	var r stormRun
	load := func() (float64, error) {
		r, err = stormWrk(cfg, script, d, portFlash, args...)
		return r.requests, err
	}
	perSys := "–"
	if withPerf {
		n, perr := syscallsDuring(cfg, s, load)
		perSys = fmt.Sprintf("%.1f", n)
		if perr != nil {
			perSys = "n/a (" + firstLine(perr.Error()) + ")"
		}
	} else {
		load()
	}
	cpu1, _ := cpuSeconds(s.pid)
	_, peak := smp.finish()
	if err != nil {
		return r, perSys, err
	}
	r.growthKB = peak - rss0
	if r.requests > 0 {
		r.cpuUSPerReq = 1e6 * (cpu1 - cpu0) / r.requests
	}
	return r, perSys, nil
}

// syscallsDuring counts the server's syscalls (perf stat) while load runs
// and returns them per request load reports.
func syscallsDuring(cfg *config, s *server, load func() (float64, error)) (float64, error) {
	out := filepath.Join(cfg.work, "perf-abuse.out")
	perf := exec.Command("perf", "stat", "-e", "raw_syscalls:sys_enter", "-x", ",", "-o", out, "-p", strconv.Itoa(s.pid))
	if err := perf.Start(); err != nil {
		if _, lerr := load(); lerr != nil {
			return 0, lerr
		}
		return 0, err
	}
	time.Sleep(300 * time.Millisecond) // let perf attach
	requests, lerr := load()
	perf.Process.Signal(syscall.SIGINT)
	perf.Wait()
	if lerr != nil {
		return 0, lerr
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 2 && strings.Contains(line, "raw_syscalls:sys_enter") {
			n, err := strconv.ParseFloat(f[0], 64)
			if err != nil || requests == 0 {
				return 0, fmt.Errorf("perf: %q, %.0f requests", line, requests)
			}
			return n / requests, nil
		}
	}
	return 0, fmt.Errorf("perf printed no count: %s", raw)
}

// reloadedSettings are the settings the flash_serve reloads change one
// after the other (as TestReloadsChangingEachSettingAnswerNo5xx's): every
// cache setting, each making a cache of its own, the transmit engine and
// a handler setting.
var reloadedSettings = [][2]string{
	{"revalidate 60s", "revalidate 30s"},
	{"max_open_files 500", "max_open_files 400"},
	{"negative_cache 1000", "negative_cache 0"},
	{"memory_cache 1MiB max_file 4KiB", "memory_cache 0"},
	{"stat_workers 8", "stat_workers 4"},
	{"max_watches 1000", "max_watches 900"},
	{"max_dir_entries 1000", "max_dir_entries 900"},
	{"inotify on", "inotify off"},
	{"transmit io_uring", "transmit sendfile"},
	{"max_ranges 16", "max_ranges 8"},
}

// reloadConfigs writes the JSON configs of generations 1…n+1 of handler:
// each Caddyfile adapted once per distinct setting (`caddy adapt`), its
// generation put in the X-Generation header afterwards.
func reloadConfigs(cfg *config, handler string, d *abuseData, n int) ([]string, error) {
	adapted := map[string]string{}
	var out []string
	for gen := 1; gen <= n+1; gen++ {
		var opts []string
		if handler == "flash_serve" {
			opts = []string{"precompressed gzip", "etag_file_extensions .etag"}
			for i, s := range reloadedSettings {
				if gen > 1 && i == gen%len(reloadedSettings) {
					opts = append(opts, s[1])
				} else {
					opts = append(opts, s[0])
				}
			}
		} else {
			// file_server has no cache: a setting of its own alternates,
			// as a control of what a reload costs without one.
			opts = []string{"precompressed gzip", "etag_file_extensions .etag", "index index.html index.txt"}
			if gen%2 == 0 {
				opts[2] = "index index.html"
			}
		}
		site := func(port int) abuseSite {
			return abuseSite{port, d.reload, []string{"header X-Generation GENERATION", handlerBlock(handler, opts...)}}
		}
		text := abuseCaddyfile(cfg, handler, fmt.Sprintf("127.0.0.1:%d", portAbuseAdmin), site(portFlash), site(portAbuseSecond))
		js, ok := adapted[text]
		if !ok {
			f := filepath.Join(cfg.work, "reload-adapt.Caddyfile")
			if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
				return nil, err
			}
			raw, err := exec.Command(cfg.caddy, "adapt", "--config", f, "--adapter", "caddyfile").Output()
			if err != nil {
				return nil, fmt.Errorf("caddy adapt: %v", err)
			}
			js = string(raw)
			adapted[text] = js
		}
		p := filepath.Join(cfg.work, fmt.Sprintf("reload-%s-%02d.json", handler, gen))
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(js, "GENERATION", strconv.Itoa(gen))), 0o644); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// 4. Reloads alternating each cache setting under HTTP/1.1 and h2c load.
func abuseReloads(cfg *config, c abuseCounts, d *abuseData) ([]abuseRow, error) {
	var rows []abuseRow
	title := fmt.Sprintf("4. %d reloads (POST /load) under h1 + h2c load, two sites sharing the cache", c.reloads)
	for _, h := range []string{"flash_serve", "file_server"} {
		configs, err := reloadConfigs(cfg, h, d, c.reloads)
		if err != nil {
			return rows, err
		}
		first, err := os.ReadFile(configs[0])
		if err != nil {
			return rows, err
		}
		s, err := startAbuse(cfg, "reload-"+h, string(first), portFlash)
		if err != nil {
			return rows, err
		}
		var res reloadResult
		err = runAbuseClient(10*time.Minute, "reload", reloadSpec{Admin: fmt.Sprintf("127.0.0.1:%d", portAbuseAdmin), Configs: configs,
			Addrs: []string{fmt.Sprintf("127.0.0.1:%d", portFlash), fmt.Sprintf("127.0.0.1:%d", portAbuseSecond)},
			Root:  d.reload, Paths: d.reloadPaths, H1: 4, H2: 8, MinLife: 100 * time.Millisecond}, &res)
		stopServers([]*server{s})
		if err != nil {
			return rows, fmt.Errorf("%s: %w", h, err)
		}
		log.Printf("abuse: reloads %s: %+v", h, res)
		fig := fmt.Sprintf("%d reloads, %d responses (%s); ≥ 500: %d, cut: %d, wrong: %d; dropped before a byte and sent again: %d",
			res.Reloads, res.Responses, statusList(res.ByStatus), res.Status5xx, res.Cut, res.Wrong, res.Dropped)
		if res.ReloadFail != "" {
			fig += "; " + res.ReloadFail
		}
		if res.FirstFailure != "" {
			fig += "; first failure: " + res.FirstFailure
		}
		goal := "every cache setting alternated: 0 statuses ≥ 500, 0 cut bodies"
		ok := res.Status5xx == 0 && res.Cut == 0 && res.Wrong == 0 && res.Reloads == c.reloads && res.ReloadFail == ""
		met := metIf(ok)
		if h != "flash_serve" {
			goal, met = "control (its `index` alternated): 0 ≥ 500, 0 cut", "control: "+met
		}
		rows = append(rows, abuseRow{title, h, fig, goal, met})
	}
	return rows, nil
}

func statusList(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d × %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// 5. A low descriptor limit with directory and file requests.
func abuseFDLimit(cfg *config, c abuseCounts, d *abuseData) ([]abuseRow, error) {
	var rows []abuseRow
	title := fmt.Sprintf("5. RLIMIT_NOFILE %d, %d connections, %d GETs of %d directories with an index and %d files of %d KiB",
		c.fdLimit, c.fdConns, c.fdReqs, abuseFDDirs, abuseFDDirs, abuseFDFileSize>>10)
	for _, h := range []string{"flash_serve", "file_server"} {
		admin := fmt.Sprintf("127.0.0.1:%d", portAbuseAdmin)
		text := abuseCaddyfile(cfg, h, admin, abuseSite{portFlash, d.fd, []string{h}})
		s, err := startAbuse(cfg, "fd-"+h, text, portFlash, "prlimit", fmt.Sprintf("--nofile=%d:%d", c.fdLimit, c.fdLimit))
		if err != nil {
			return rows, err
		}
		// Descriptors below the limit: one the server inherited above it
		// (a shell's) takes no room in its table.
		fds := func() int {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
			n := 0
			for _, e := range ents {
				if fd, err := strconv.Atoi(e.Name()); err == nil && fd < c.fdLimit {
					n++
				}
			}
			return n
		}
		atStart := fds()
		// Every connection must fit beside what the server holds at the
		// start, or the last ones are never accepted: fewer here (said in
		// the figures) on a system where Caddy starts with more open.
		conns := min(c.fdConns, c.fdLimit-atStart-4)
		stop, peak := make(chan struct{}), make(chan int)
		go func() {
			most := 0
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				most = max(most, fds())
				select {
				case <-stop:
					peak <- most
					return
				case <-t.C:
				}
			}
		}()
		var res fdResult
		err = runAbuseClient(5*time.Minute, "fdlimit", fdSpec{Base: fmt.Sprintf("http://127.0.0.1:%d", portFlash), Root: d.fd,
			Warm: "/1k.bin", Paths: d.fdPaths, Conns: conns, Requests: c.fdReqs, RcvBuf: abuseFDRcvBuf}, &res)
		close(stop)
		most := <-peak
		var st struct {
			Rejected map[string]int64 `json:"rejected"`
			Statacc  struct {
				Shed int64 `json:"shed"`
			} `json:"statacc"`
		}
		var stErr error
		if h == "flash_serve" {
			stErr = adminGetJSON("http://"+admin+"/flash_serve/stats", &st)
		}
		stopServers([]*server{s})
		if err != nil {
			return rows, fmt.Errorf("%s: %w", h, err)
		}
		log.Printf("abuse: fd limit %s: %+v, fds %d at the start, %d at most", h, res, atStart, most)
		fig := fmt.Sprintf("%d descriptors open at the start, %d at most; %d/%d connections made; 200 exact: %d, 503 + Retry-After: %d, "+
			"503 without: %d, 404: %d, other: %d (%s), no answer: %d",
			atStart, most, res.Connected, conns, res.OK, res.Unavailable, res.NoRetry, res.NotFound, res.Other, statusList(res.ByStatus), res.Errors)
		switch {
		case stErr != nil:
			fig += "; stats: " + firstLine(stErr.Error())
		case h == "flash_serve":
			rejected := map[string]int{}
			for k, v := range st.Rejected {
				rejected[k] = int(v)
			}
			fig += fmt.Sprintf("; the cache shed idle descriptors %d times; 503s by cause: %s", st.Statacc.Shed, statusList(rejected))
		}
		if res.FirstFailure != "" {
			fig += "; first failure: " + res.FirstFailure
		}
		ok := res.NotFound == 0 && res.Other == 0 && res.NoRetry == 0 && res.Errors == 0 && res.OK > 0
		goal := "0 404s for existing pages; every failure a 503 with Retry-After"
		met := metIf(ok)
		if h != "flash_serve" {
			met = "control: " + met
		}
		rows = append(rows, abuseRow{title, h, fig, goal, met})
	}
	return rows, nil
}

// adminGetJSON decodes the JSON answer of an admin API GET into into.
func adminGetJSON(url string, into any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// loadAverage is the 1, 5 and 15 minute load averages.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func abuseMarkdown(cfg *config, c abuseCounts, rows []abuseRow, took time.Duration, loadStart string) string {
	var b strings.Builder
	commit, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
	fmt.Fprintf(&b, "%s (`bench/run --abuse`, issue 29)\n\n", abuseHeading)
	fmt.Fprintf(&b, "- Date: %s; command `%s`; commit %s; the whole run took %s.\n", time.Now().UTC().Format("2006-01-02 15:04 MST"),
		strings.TrimSpace(cfg.command), strings.TrimSpace(string(commit)), took.Round(time.Second))
	fmt.Fprintf(&b, "- Machine: %s\n", machine())
	fmt.Fprintf(&b, "- Load average (1, 5, 15 min) at the start: %s; at the end: %s (the run itself keeps both CPUs busy).\n", loadStart, loadAverage())
	b.WriteString("- One Caddy (`go build ./xcaddy`) at a time, fresh for each scenario and run, pinned to CPU 0 on 127.0.0.1, `protocols h1 h2c`, " +
		"flash_serve with its listener wrapper and otherwise its defaults unless said; the clients (the harness's own, or wrk) on CPU 1. " +
		"RSS is VmRSS of the server; MB are 10^6 bytes.\n")
	fmt.Fprintf(&b, "- 1: %d HTTP/2 streams at a zero window (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE; 150 a connection), each a cold range "+
		"of 16 or 80 KiB 160 KiB apart, and %d HTTP/1.1 clients with a 4 KiB receive buffer that never read a cold 1 MiB file "+
		"(flash_serve: on a `transmit io_uring` site); then %d probes of each of a 16 KiB and an 8 MiB file over HTTP/1.1 (a new connection each) and h2c, each evicted "+
		"(POSIX_FADV_DONTNEED) first, 10 s timeout. RSS before the clients and %s after they all began.\n", c.streams, c.readers, c.rounds, secs(c.settle))
	fmt.Fprintf(&b, "- 2: %d HTTP/1.1 non-readers (4 KiB receive buffer, `Accept-Encoding: gzip`) of a cold 8 MiB `.bin` behind `encode gzip` "+
		"(not compressed: encode passes it through as file_server writes it; flash_serve with `transmit io_uring`); RSS before and %s after the last began.\n", c.encodeReaders, secs(2*c.settle))
	fmt.Fprintf(&b, "- 3: wrk -t1 -c64 with a Lua script that makes a new path for each request and counts answers that are not 404; %d runs of each server, "+
		"interleaved (flash_serve, file_server, `respond 404`), each on a fresh server; req/s is the median (404s only), CPU µs per request from /proc/PID/stat, "+
		"RSS growth the peak sampled during a run over the RSS before it (the largest of the runs); syscalls per request from `perf stat -e raw_syscalls:sys_enter` "+
		"over one more run of %s per server.\n", c.stormRuns, secs(c.perf))
	fmt.Fprintf(&b, "- 4: two sites sharing one cache, %d reloads (JSON from `caddy adapt`, POST /load), generation g changing setting g mod 10 of: %s; "+
		"4 HTTP/1.1 and 8 h2c clients fetch 212 paths (memory, sendfile, ring bodies, an index, a gzip sidecar, an ETag file) and check each body; "+
		"each generation serves at least 100 ms and answers both protocols 4 times before the next reload. A request whose connection closed before any byte of its answer "+
		"(what a handover may drop) is sent again and counted as dropped.\n", c.reloads, reloadedSettingsList())
	fmt.Fprintf(&b, "- 5: the server started under `prlimit --nofile=%d:%d`; %d keep-alive connections opened first, then %d GETs of %d directory paths "+
		"(index.html or index.txt) and %d files at random.\n\n", c.fdLimit, c.fdLimit, c.fdConns, c.fdReqs, abuseFDDirs, abuseFDDirs)
	if cfg.mode == "abuse-smoke" {
		b.WriteString("Smoke mode: a few clients and requests of each scenario; the figures and goals mean nothing.\n\n")
	}
	b.WriteString("| scenario | server | figures | goal | met |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.scenario, r.server, strings.ReplaceAll(r.figures, "|", "\\|"), r.goal, r.met)
	}
	return b.String()
}

func reloadedSettingsList() string {
	var parts []string
	for _, s := range reloadedSettings {
		parts = append(parts, "`"+s[0]+"` ↔ `"+s[1]+"`")
	}
	return strings.Join(parts, ", ")
}
