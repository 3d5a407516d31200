//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The growth workload (bench/run --scale): a tree of a million small files,
// created once and kept, every file requested once and as many paths that
// do not exist, and flash_serve's RSS measured after each pass.

const (
	portScaleAdmin = 18098
	scalePerDir    = 1000
	scaleConns     = 64
)

// scaleTree is the kept tree: files of size bytes, scalePerDir a folder.
type scaleTree struct {
	root  string
	files int
	size  int
}

func (t scaleTree) dirs() int { return (t.files + scalePerDir - 1) / scalePerDir }

// path is the request path of file i; missing is one of the same length
// in the same folder that does not exist.
func (t scaleTree) path(i int) string    { return fmt.Sprintf("/d%04d/f%07d.bin", i/scalePerDir, i) }
func (t scaleTree) missing(i int) string { return fmt.Sprintf("/d%04d/m%07d.bin", i/scalePerDir, i) }

func (t scaleTree) progressFile() string { return t.root + ".progress" }

// doneDirs is how many folders an earlier run finished.
func (t scaleTree) doneDirs() int {
	raw, err := os.ReadFile(t.progressFile())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return n
}

// need is the disk space and inodes the rest of the tree takes: each file
// in whole 4 KiB blocks, each folder's entries about 64 KiB.
func (t scaleTree) need() (bytes, inodes uint64) {
	left := uint64(max(0, t.files-t.doneDirs()*scalePerDir))
	dirsLeft := uint64(max(0, t.dirs()-t.doneDirs()))
	blocks := uint64(max(1, (t.size+4095)/4096))
	return left*blocks*4096 + dirsLeft*64<<10, left + dirsLeft
}

// chooseScaleTree picks the tree under dir: files of size bytes if the disk
// holds them with 2 GiB to spare, else of 1 KiB (said in the report).
func chooseScaleTree(dir string, files, size int) (scaleTree, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return scaleTree{}, "", err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return scaleTree{}, "", err
	}
	free, freeInodes := st.Bavail*uint64(st.Bsize), st.Ffree
	const spare = 2 << 30
	note := ""
	for _, s := range []int{size, 1024} {
		t := scaleTree{root: filepath.Join(dir, fmt.Sprintf("%dx%d", files, s)), files: files, size: s}
		b, n := t.need()
		if b+spare <= free && n <= freeInodes {
			return t, note, nil
		}
		note = fmt.Sprintf("Files of %d B would not fit with 2 GiB to spare (%.1f GiB and %d inodes needed, %.1f GiB and %d free under %s): ",
			s, float64(b)/(1<<30), n, float64(free)/(1<<30), freeInodes, dir)
		if s <= 1024 {
			break
		}
		note += "1 KiB files instead"
	}
	return scaleTree{}, "", fmt.Errorf("%s", strings.TrimSuffix(note, ": "))
}

// create writes the folders an earlier run did not finish, and records each
// finished one, so that an interrupted creation resumes where it stopped.
func (t scaleTree) create() error {
	done := t.doneDirs()
	if done >= t.dirs() {
		return nil
	}
	log.Printf("scale: creating %d files of %d B under %s (%d of %d folders were done)", t.files, t.size, t.root, done, t.dirs())
	rng := rand.New(rand.NewPCG(3, uint64(done)))
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	start := time.Now()
	for d := done; d < t.dirs(); d++ {
		dir := filepath.Join(t.root, fmt.Sprintf("d%04d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for i := d * scalePerDir; i < min(t.files, (d+1)*scalePerDir); i++ {
			off := rng.IntN(len(block) - t.size)
			if err := os.WriteFile(filepath.Join(t.root, t.path(i)), block[off:off+t.size], 0o644); err != nil {
				return err
			}
		}
		tmp := t.progressFile() + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(d+1)+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, t.progressFile()); err != nil {
			return err
		}
		if (d+1)%100 == 0 {
			el := time.Since(start)
			eta := time.Duration(float64(el) / float64(d+1-done) * float64(t.dirs()-d-1))
			log.Printf("scale: %d of %d folders, ETA %s", d+1, t.dirs(), eta.Round(time.Second))
		}
	}
	log.Printf("scale: tree created in %s", time.Since(start).Round(time.Second))
	return nil
}

// writeScaleURIs writes the paths of every file in a random order, and as
// many missing ones, and returns their mean length.
func writeScaleURIs(t scaleTree, present, missing string) (float64, error) {
	rng := rand.New(rand.NewPCG(5, 8))
	order := rng.Perm(t.files)
	var p, m strings.Builder
	total := 0
	for _, i := range order {
		s := t.path(i)
		total += len(s)
		p.WriteString(s + "\n")
		m.WriteString(t.missing(i) + "\n")
	}
	if err := os.WriteFile(present, []byte(p.String()), 0o644); err != nil {
		return 0, err
	}
	return float64(total) / float64(t.files), os.WriteFile(missing, []byte(m.String()), 0o644)
}

// scaleSnapshot is flash_serve's memory and cache after one stage.
type scaleSnapshot struct {
	stage string
	pass  fetchResult
	// rssKB is VmRSS right after the forced GC; settledKB once the Go
	// runtime's background scavenger has returned the free memory it
	// returns on its own (settleRSS), settleSecs later.
	rssKB, settledKB int
	settleSecs       float64
	settled          bool
	// heapAlloc is the live Go heap after a forced GC, heapGoal the size
	// the runtime lets it grow to before the next (GOGC), heapFree the
	// free heap it holds and has not given back to the OS.
	heapAlloc, heapGoal, heapFree uint64
	entries, negative, open       int64
	expired                       int64
	memoryBytes                   int64
}

func (s scaleSnapshot) positive() int64 { return s.entries - s.negative }

// scaleAdmin is the admin API of the growth run's flash_serve.
var scaleAdmin = fmt.Sprintf("http://127.0.0.1:%d", portScaleAdmin)

// adminGet asks flash_serve's admin API for path and decodes its JSON into
// into (nil: discarded).
func adminGet(path string, into any) error {
	resp, err := http.Get(scaleAdmin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if into == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// purgeScale drops every entry of flash_serve's cache under root
// (POST /flash_serve/purge) and returns how many there were.
func purgeScale(root string) (int, error) {
	resp, err := http.Post(scaleAdmin+"/flash_serve/purge", "application/json", strings.NewReader(fmt.Sprintf(`{"prefix": %q}`, root)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Purged int `json:"purged"`
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("purge: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out.Purged, err
}

// snapshotFlash reads flash_serve's counters through its admin API, forces
// a GC (pprof's heap profile with gc=1, kept in profile if not ""), reads
// the live heap and the RSS, then waits for the RSS to settle.
func snapshotFlash(pid int, stage, profile string) (scaleSnapshot, error) {
	snap := scaleSnapshot{stage: stage}
	var st struct {
		Statacc struct {
			Entries  int64 `json:"entries"`
			Negative int64 `json:"negative_entries"`
			Open     int64 `json:"open_files"`
			Memory   int64 `json:"memory_bytes"`
			Expired  int64 `json:"expired"`
		} `json:"statacc"`
	}
	if err := adminGet("/flash_serve/stats", &st); err != nil {
		return snap, err
	}
	snap.entries, snap.negative, snap.open, snap.memoryBytes = st.Statacc.Entries, st.Statacc.Negative, st.Statacc.Open, st.Statacc.Memory
	snap.expired = st.Statacc.Expired
	// Two collections: a sync.Pool keeps what it holds across one (its
	// victim cache) and drops it at the next, so that after one GC the
	// heap still counts the buffers the last requests left in the pools
	// (at 518306b: 18 MiB of 256 KiB read chunks after the first pass),
	// and a later stage, one GC further, does not: the difference would
	// be charged to the entries.
	if err := adminGet("/debug/pprof/heap?gc=1", nil); err != nil {
		return snap, err
	}
	resp, err := http.Get(scaleAdmin + "/debug/pprof/heap?gc=1")
	if err != nil {
		return snap, err
	}
	prof, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return snap, err
	}
	if profile != "" {
		if err := os.WriteFile(profile, prof, 0o644); err != nil {
			log.Printf("scale: %v", err)
		}
	}
	var vars struct {
		Memstats struct {
			HeapAlloc, HeapIdle, HeapReleased, NextGC uint64
		} `json:"memstats"`
	}
	if err := adminGet("/debug/vars", &vars); err != nil {
		return snap, err
	}
	m := vars.Memstats
	snap.heapAlloc, snap.heapGoal, snap.heapFree = m.HeapAlloc, m.NextGC, m.HeapIdle-m.HeapReleased
	_, snap.rssKB = procStatus(pid)
	snap.settledKB, snap.settleSecs, snap.settled = settleRSS(pid, snap.rssKB)
	return snap, nil
}

// settleRSS waits, up to a minute, until the RSS of pid has moved by less
// than 1 MiB over 5 s, and returns it: after a pass, RSS still holds
// pages the collector freed, which the runtime's background scavenger
// gives back to the OS over the next seconds (down to about 1.1 times the
// heap in use). settled is false if it was still moving after the minute.
func settleRSS(pid, first int) (kb int, secs float64, settled bool) {
	const (
		every  = 500 * time.Millisecond
		window = 10 // samples: 5 s
		limit  = time.Minute
	)
	start := time.Now()
	samples := []int{first}
	for time.Since(start) < limit {
		time.Sleep(every)
		_, rss := procStatus(pid)
		samples = append(samples, rss)
		if len(samples) > window {
			w := samples[len(samples)-window-1:]
			if slices.Max(w)-slices.Min(w) < 1024 {
				return rss, time.Since(start).Seconds(), true
			}
		}
	}
	return samples[len(samples)-1], time.Since(start).Seconds(), false
}

// scaleMaxOpen is the max_open_files of the growth run: three quarters of
// the descriptor limit (the rest for connections), at most one a file.
func scaleMaxOpen(files int) int {
	return int(min(uint64(files), max(1000, noFile*3/4)))
}

// scaleRevalidate is the growth run's revalidate: longer than the run, so
// that what is measured is a cache that holds every entry the passes made.
// With the default (60 s) the janitor drops each entry not asked for again
// within it (a negative of a watched directory within twice it), so a
// pass of several minutes keeps only its last minutes' entries (at
// 64947ec: 261,337 of a million negatives).
const scaleRevalidate = time.Hour

func scaleCaddyfile(cfg *config, t scaleTree, maxOpen int) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	log {
		level ERROR
	}
%s}
http://127.0.0.1:%d {
	bind 127.0.0.1
	root * %s
	flash_serve {
		max_open_files %d
		negative_cache %d
		revalidate %s
	}
}
`, portScaleAdmin, flashGlobalOptions, portFlash, t.root, maxOpen, t.files, scaleRevalidate)
}

// scaleReport is what runScale measured.
type scaleReport struct {
	tree          scaleTree
	note, created string
	maxOpen       int
	urlLen        float64
	snaps         []scaleSnapshot
	e             map[string]*result
	eTitle        string
	names         []string
}

// runScale is bench/run --scale.
func runScale(cfg *config, dir string, files, size int, treeOnly, withE bool) error {
	if !treeOnly {
		if err := portsFree(portFlash, portFile, portNginx, portScaleAdmin); err != nil {
			return err
		}
	}
	t, note, err := chooseScaleTree(dir, files, size)
	if err != nil {
		return err
	}
	if note != "" {
		log.Printf("scale: %s", note)
	}
	rep := &scaleReport{tree: t, note: note, created: "kept from an earlier run"}
	start := time.Now()
	if t.doneDirs() < t.dirs() {
		if err := t.create(); err != nil {
			return fmt.Errorf("creating the scale tree: %w", err)
		}
		rep.created = "created in " + time.Since(start).Round(time.Second).String()
	}
	if treeOnly {
		log.Printf("scale: the tree under %s is whole", t.root)
		return nil
	}
	present, missing := filepath.Join(cfg.work, "scale.uris"), filepath.Join(cfg.work, "scale-missing.uris")
	if rep.urlLen, err = writeScaleURIs(t, present, missing); err != nil {
		return err
	}
	log.Printf("building ./xcaddy")
	if err := buildCaddy(cfg); err != nil {
		return err
	}
	cfg.data = t.root
	rep.maxOpen = scaleMaxOpen(t.files)
	conf := filepath.Join(cfg.work, "scale.Caddyfile")
	if err := os.WriteFile(conf, []byte(scaleCaddyfile(cfg, t, rep.maxOpen)), 0o644); err != nil {
		return err
	}
	flash := serverSpec{&server{name: "flash_serve", port: portFlash}, []string{cfg.caddy, "run", "--config", conf, "--adapter", "caddyfile"}}
	servers, err := launch(cfg, []serverSpec{flash})
	defer func() { stopServers(servers) }()
	if err != nil {
		return err
	}
	fs := servers[0]
	profiles := filepath.Join(os.TempDir(), "flash-bench-scale-heap")
	os.MkdirAll(profiles, 0o755)
	snapshot := func(stage string, pass fetchResult) error {
		snap, err := snapshotFlash(fs.pid, stage, filepath.Join(profiles, fmt.Sprintf("%d.pb.gz", len(rep.snaps))))
		if err != nil {
			return err
		}
		snap.pass = pass
		rep.snaps = append(rep.snaps, snap)
		log.Printf("scale: %s: RSS %d MiB, %d MiB settled after %.0f s, heap %d MiB (goal %d MiB, %d MiB free not returned), %d entries (%d negative), %d open, %d expired",
			stage, snap.rssKB>>10, snap.settledKB>>10, snap.settleSecs, snap.heapAlloc>>20, snap.heapGoal>>20, snap.heapFree>>20,
			snap.entries, snap.negative, snap.open, snap.expired)
		return nil
	}
	pass := func(stage, uris, want string) error {
		log.Printf("scale: %s", stage)
		res, err := fetchPass(cfg, uris, fs.url(""), scaleConns)
		if err != nil {
			return err
		}
		if res.Status[want] != t.files {
			log.Printf("scale: %d of %d answered %s (%v, %d errors)", res.Status[want], t.files, want, res.Status, res.Errors)
		}
		log.Printf("scale: %.0f s", res.Seconds)
		return snapshot(stage, res)
	}
	if err := snapshot(stageStarted, fetchResult{}); err != nil {
		return err
	}
	if err := pass(fmt.Sprintf("after the first pass: each of the %d files once", t.files), present, "200"); err != nil {
		return err
	}
	// The entries the pass left are dropped, so that what they held is
	// told apart from what the pass left that is not theirs: the buffers
	// its 64 connections and their requests keep (net/http's, the read
	// buffers' pools), the runtime's.
	n, err := purgeScale(t.root)
	if err != nil {
		return err
	}
	log.Printf("scale: purged %d entries", n)
	if err := snapshot(stagePurged, fetchResult{}); err != nil {
		return err
	}
	if err := pass(fmt.Sprintf("after %d paths that do not exist, once each", t.files), missing, "404"); err != nil {
		return err
	}

	if withE {
		if err := scaleE(cfg, t, present, rep, &servers, snapshot); err != nil {
			return err
		}
	}
	for _, s := range servers {
		rep.names = append(rep.names, s.name)
	}
	section := rep.markdown(cfg)
	fmt.Print(section)
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	old, _ := os.ReadFile(cfg.out)
	if err := os.WriteFile(cfg.out, []byte(replaceSection(string(old), growthHeading, section)), 0o644); err != nil {
		return err
	}
	log.Printf("wrote the growth section of %s", cfg.out)
	return nil
}

// scaleE is the growth run's last stage: e on the tree, with file_server
// and nginx started beside flash_serve (added to servers, which the
// caller stops), and a snapshot after it.
func scaleE(cfg *config, t scaleTree, present string, rep *scaleReport, servers *[]*server, snapshot func(string, fetchResult) error) error {
	var more []serverSpec
	fconf := filepath.Join(cfg.work, "scale-file_server.Caddyfile")
	if err := os.WriteFile(fconf, []byte(caddyfile(cfg.work, t.root, "file_server", portFile, 0, "")), 0o644); err != nil {
		return err
	}
	more = append(more, serverSpec{&server{name: "file_server", port: portFile}, []string{cfg.caddy, "run", "--config", fconf, "--adapter", "caddyfile"}})
	if cfg.nginx != "" {
		nconf := filepath.Join(cfg.work, "scale-nginx.conf")
		if err := os.WriteFile(nconf, []byte(nginxConf(cfg.work, t.root, "scale-nginx", portNginx, false)), 0o644); err != nil {
			return err
		}
		more = append(more, serverSpec{&server{name: "nginx", port: portNginx}, []string{cfg.nginx, "-p", cfg.work, "-c", nconf}})
	}
	others, err := launch(cfg, more)
	*servers = append(*servers, others...)
	if err != nil {
		return err
	}
	rep.eTitle = fmt.Sprintf("e on the %d-file tree: %d B random, 200 conns, warm", t.files, t.size)
	w := workload{id: "e", title: rep.eTitle, unit: "req/s", resident: []string{"."},
		run: func(cfg *config, s *server) (measurement, error) {
			return wrk(cfg, 200, s.url(""), present, int64(t.size))
		}}
	saved := cfg.runs
	cfg.runs = min(cfg.runs, 3) // each run checks a million files resident
	rep.e = map[string]*result{}
	measureWorkload(cfg, w, *servers, rep.e)
	cfg.runs = saved
	if err := snapshot("after "+rep.eTitle+" (descriptors cached again, the negatives kept)", fetchResult{}); err != nil {
		return err
	}
	return nil
}

const growthHeading = "## Growth"

// The stages of the growth run that are not passes.
const (
	stageStarted = "started"
	stagePurged  = "after purging the file entries (`POST /flash_serve/purge`)"
)

func (r *scaleReport) markdown(cfg *config) string {
	var b strings.Builder
	t := r.tree
	fmt.Fprintf(&b, "%s: %d files (`bench/run --scale`)\n\n", growthHeading, t.files)
	fmt.Fprintf(&b, "- Date: %s; command `%s`.\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSpace(cfg.command))
	fmt.Fprintf(&b, "- Machine: %s\n", machine())
	fmt.Fprintf(&b, "- Tree: %d files of %d B in %d folders of %d under `%s` (%s).", t.files, t.size, t.dirs(), scalePerDir, t.root, r.created)
	if r.note != "" {
		fmt.Fprintf(&b, " %s.", r.note)
	}
	fmt.Fprintf(&b, "\n- flash_serve: `max_open_files %d` (RLIMIT_NOFILE %d), `negative_cache %d`, `revalidate` as below, the other settings their defaults. "+
		"Each pass requests every path once, in a random order, over %d keep-alive connections (the harness's own client on CPU 1).\n", r.maxOpen, noFile, t.files, scaleConns)
	fmt.Fprintf(&b, "- `revalidate %s`: longer than the run, so that the cache keeps every entry the passes make; with the default 60 s the janitor drops each one "+
		"not asked for within it (a negative one within twice it), and a pass of minutes keeps only its last minutes' entries (expired: the entries it dropped).\n", scaleRevalidate)
	b.WriteString("- After each stage the harness forces two GCs (admin API `/debug/pprof/heap?gc=1`, twice: a sync.Pool drops what it holds at the second) and reads: **Go heap**, `HeapAlloc` then (`/debug/vars`): the live heap; " +
		"**heap goal**, `NextGC`: what the runtime lets the heap grow to before its next collection (GOGC=100: about twice the live heap), which a busy server's RSS follows; " +
		"**RSS**, VmRSS of the process at once, which still holds the pages of what the collector freed; **RSS settled**, VmRSS once it moved by less than 1 MiB over 5 s " +
		"(at most a minute): the runtime's background scavenger gives free pages back to the OS down to about 1.1 times the heap in use, so this is the RSS of the process at rest. " +
		"Entries, open files, expired entries and memory_cache bytes from `/flash_serve/stats`. Heap profiles of each stage: `" + filepath.Join(os.TempDir(), "flash-bench-scale-heap") + "/N.pb.gz`.\n\n")
	b.WriteString("| stage | requests | answers | time s | req/s | entries | of them negative | open files | expired | memory_cache MiB | RSS MiB | RSS settled MiB | Go heap MiB | heap goal MiB |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.snaps {
		reqs, answers, secs, rate := "–", "–", "–", "–"
		if s.pass.Requests > 0 {
			reqs, secs = strconv.Itoa(s.pass.Requests), fmt.Sprintf("%.1f", s.pass.Seconds)
			rate = fmtValue(float64(s.pass.Requests)/s.pass.Seconds, "req/s")
			var parts []string
			for code, n := range s.pass.Status {
				parts = append(parts, fmt.Sprintf("%d × %s", n, code))
			}
			if s.pass.Errors > 0 {
				parts = append(parts, fmt.Sprintf("%d errors", s.pass.Errors))
			}
			answers = strings.Join(parts, ", ")
		}
		settled := fmt.Sprintf("%.0f (%.0f s)", float64(s.settledKB)/1024, s.settleSecs)
		if !s.settled {
			settled += ", still moving"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %d | %d | %.1f | %.0f | %s | %.0f | %.0f |\n", s.stage, reqs, answers, secs, rate,
			s.entries, s.negative, s.open, s.expired, float64(s.memoryBytes)/(1<<20), float64(s.rssKB)/1024, settled,
			float64(s.heapAlloc)/(1<<20), float64(s.heapGoal)/(1<<20))
	}
	fsLen := float64(len(t.root)) + r.urlLen
	find := func(stage string) (scaleSnapshot, bool) {
		for _, s := range r.snaps {
			if s.stage == stage {
				return s, true
			}
		}
		return scaleSnapshot{}, false
	}
	// per writes what n entries cost: what the process holds more at z
	// than at a.
	per := func(kind, how string, a, z scaleSnapshot, n int64) {
		if n <= 0 {
			fmt.Fprintf(&b, "- Per %s entry: none.\n", kind)
			return
		}
		f := func(x, y float64) float64 { return (y - x) / float64(n) }
		fmt.Fprintf(&b, "- Per %s entry (%d, %s): Go heap %.0f B, RSS settled %.0f B, RSS at once %.0f B; memory_cache content %.0f B of it. "+
			"Its request path is %.0f B long, its filesystem path %.0f B.\n", kind, n, how,
			f(float64(a.heapAlloc), float64(z.heapAlloc)), f(float64(a.settledKB)*1024, float64(z.settledKB)*1024),
			f(float64(a.rssKB)*1024, float64(z.rssKB)*1024), f(float64(a.memoryBytes), float64(z.memoryBytes)), r.urlLen, fsLen)
	}
	started, ok0 := find(stageStarted)
	purged, ok1 := find(stagePurged)
	if ok0 && ok1 && len(r.snaps) >= 4 {
		first, negs := r.snaps[1], r.snaps[3]
		b.WriteString("\n")
		per("file", "what purging them gave back: the entries and their share of the watcher's directory nodes", purged, first, first.positive()-purged.positive())
		per("negative", "what the pass of missing paths added to the purged cache", purged, negs, negs.negative-purged.negative)
		n := first.positive() - started.positive()
		if n > 0 {
			fmt.Fprintf(&b, "- The first pass's growth from the start, over its %d file entries (what the previous figure for a file entry was): Go heap %.0f B, "+
				"RSS settled %.0f B, RSS at once %.0f B each; what purging did not give back (Go heap %.1f MiB) is not the entries': "+
				"the buffers the pass's connections and requests keep, the runtime's own.\n", n,
				(float64(first.heapAlloc)-float64(started.heapAlloc))/float64(n), float64(first.settledKB-started.settledKB)*1024/float64(n),
				float64(first.rssKB-started.rssKB)*1024/float64(n), (float64(purged.heapAlloc)-float64(started.heapAlloc))/(1<<20))
		}
	}
	if r.e != nil {
		fmt.Fprintf(&b, "\n### %s\n\n", r.eTitle)
		b.WriteString("Median of the runs, servers interleaved, each run after a residency check of the whole tree.\n\n")
		b.WriteString("| server | req/s | MB/s | p50 ms | p99 ms | spread | resident % | peak threads | peak RSS MiB | note |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, name := range serverNames(r.names, r.e) {
			res := r.e[name]
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.2f | %.0f%% | %s | %d | %.0f | %s |\n", name,
				fmtValue(res.median(func(m measurement) float64 { return m.value }), "req/s"),
				res.median(func(m measurement) float64 { return m.mbps }),
				res.median(func(m measurement) float64 { return m.p50 }), res.median(func(m measurement) float64 { return m.p99 }),
				res.spread(), res.residentCell(), res.threads, float64(res.rssKB)/1024, res.err)
		}
		fmt.Fprintf(&b, "\nflash_serve / file_server: %s; flash_serve / nginx: %s.\n", ratio(r.e, "flash_serve", "file_server"), ratio(r.e, "flash_serve", "nginx"))
	}
	return b.String()
}

// replaceSection puts section in place of the one of doc that starts with
// heading (up to the next "## " heading), or at its end.
func replaceSection(doc, heading, section string) string {
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section
	}
	rest := doc[i+1+len(heading):]
	end := strings.Index(rest, "\n## ")
	tail := ""
	if end >= 0 {
		tail = rest[end:]
	}
	return doc[:i+1] + strings.TrimRight(section, "\n") + "\n" + tail
}

// keptSection is the section of the file at path that starts with heading,
// or "": a full run keeps the growth section that --scale wrote.
func keptSection(path, heading string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	doc := string(raw)
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		return ""
	}
	rest := doc[i+1:]
	if end := strings.Index(rest[len(heading):], "\n## "); end >= 0 {
		rest = rest[:len(heading)+end+1]
	}
	return rest
}
