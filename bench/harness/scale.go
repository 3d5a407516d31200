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
	stage                   string
	pass                    fetchResult
	rssKB                   int
	heapAlloc               uint64 // Go heap after a forced GC
	entries, negative, open int64
	memoryBytes             int64
}

func (s scaleSnapshot) positive() int64 { return s.entries - s.negative }

// snapshotFlash reads flash_serve's counters through its admin API, forces
// a GC (pprof's heap profile with gc=1) and reads the live heap and RSS.
func snapshotFlash(pid int, stage string) (scaleSnapshot, error) {
	snap := scaleSnapshot{stage: stage}
	admin := fmt.Sprintf("http://127.0.0.1:%d", portScaleAdmin)
	get := func(path string, into any) error {
		resp, err := http.Get(admin + path)
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
	var st struct {
		Statacc struct {
			Entries  int64 `json:"entries"`
			Negative int64 `json:"negative_entries"`
			Open     int64 `json:"open_files"`
			Memory   int64 `json:"memory_bytes"`
		} `json:"statacc"`
	}
	if err := get("/flash_serve/stats", &st); err != nil {
		return snap, err
	}
	snap.entries, snap.negative, snap.open, snap.memoryBytes = st.Statacc.Entries, st.Statacc.Negative, st.Statacc.Open, st.Statacc.Memory
	if err := get("/debug/pprof/heap?gc=1", nil); err != nil {
		return snap, err
	}
	var vars struct {
		Memstats struct {
			HeapAlloc uint64 `json:"HeapAlloc"`
		} `json:"memstats"`
	}
	if err := get("/debug/vars", &vars); err != nil {
		return snap, err
	}
	snap.heapAlloc = vars.Memstats.HeapAlloc
	_, snap.rssKB = procStatus(pid)
	return snap, nil
}

// scaleMaxOpen is the max_open_files of the growth run: three quarters of
// the descriptor limit (the rest for connections), at most one a file.
func scaleMaxOpen(files int) int {
	return int(min(uint64(files), max(1000, noFile*3/4)))
}

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
	}
}
`, portScaleAdmin, flashGlobalOptions, portFlash, t.root, maxOpen, t.files)
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
func runScale(cfg *config, dir string, files, size int) error {
	if err := portsFree(portFlash, portFile, portNginx, portScaleAdmin); err != nil {
		return err
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
	snap, err := snapshotFlash(fs.pid, "started")
	if err != nil {
		return err
	}
	rep.snaps = append(rep.snaps, snap)
	for _, pass := range []struct {
		stage, uris, want string
	}{
		{fmt.Sprintf("after the first pass: each of the %d files once", t.files), present, "200"},
		{fmt.Sprintf("after %d paths that do not exist, once each", t.files), missing, "404"},
	} {
		log.Printf("scale: %s", pass.stage)
		res, err := fetchPass(cfg, pass.uris, fs.url(""), scaleConns)
		if err != nil {
			return err
		}
		if res.Status[pass.want] != t.files {
			log.Printf("scale: %d of %d answered %s (%v, %d errors)", res.Status[pass.want], t.files, pass.want, res.Status, res.Errors)
		}
		snap, err := snapshotFlash(fs.pid, pass.stage)
		if err != nil {
			return err
		}
		snap.pass = res
		rep.snaps = append(rep.snaps, snap)
		log.Printf("scale: %.0f s, RSS %d MiB, %d entries (%d negative), %d open", res.Seconds, snap.rssKB>>10, snap.entries, snap.negative, snap.open)
	}

	// e on the big tree, with file_server and nginx beside it.
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
	servers = append(servers, others...)
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
	measureWorkload(cfg, w, servers, rep.e)
	cfg.runs = saved
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

const growthHeading = "## Growth"

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
	fmt.Fprintf(&b, "\n- flash_serve: `max_open_files %d` (RLIMIT_NOFILE %d), `negative_cache %d`, the other settings their defaults. "+
		"Each pass requests every path once, in a random order, over %d keep-alive connections (the harness's own client on CPU 1).\n", r.maxOpen, noFile, t.files, scaleConns)
	b.WriteString("- RSS: VmRSS of the flash_serve process; Go heap: `HeapAlloc` after a forced GC (admin API `/debug/pprof/heap?gc=1`, then `/debug/vars`); " +
		"entries, open files and memory_cache bytes from `/flash_serve/stats`.\n\n")
	b.WriteString("| stage | requests | answers | time s | req/s | entries | of them negative | open files | memory_cache MiB | RSS MiB | Go heap MiB |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
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
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %d | %.1f | %.0f | %.0f |\n", s.stage, reqs, answers, secs, rate,
			s.entries, s.negative, s.open, float64(s.memoryBytes)/(1<<20), float64(s.rssKB)/1024, float64(s.heapAlloc)/(1<<20))
	}
	fsLen := float64(len(t.root)) + r.urlLen
	if len(r.snaps) == 3 {
		per := func(kind string, a, z scaleSnapshot, n int64) {
			if n <= 0 {
				fmt.Fprintf(&b, "- Per %s entry: none were added.\n", kind)
				return
			}
			rss := float64(z.rssKB-a.rssKB) * 1024 / float64(n)
			mem := float64(z.memoryBytes-a.memoryBytes) / float64(n)
			heap := (float64(z.heapAlloc) - float64(a.heapAlloc)) / float64(n)
			fmt.Fprintf(&b, "- Per %s entry (%d added): RSS %.0f B, of which memory_cache content %.0f B, so %.0f B without it; Go heap %.0f B. "+
				"Its request path is %.0f B long, its filesystem path %.0f B.\n", kind, n, rss, mem, rss-mem, heap, r.urlLen, fsLen)
		}
		b.WriteString("\n")
		per("file", r.snaps[0], r.snaps[1], r.snaps[1].positive()-r.snaps[0].positive())
		per("negative", r.snaps[1], r.snaps[2], r.snaps[2].negative-r.snaps[1].negative)
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
