//go:build linux

package main

import (
	"fmt"
	"html"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

func machine() string {
	cpu := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(raw), "\n")
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	ver := func(args ...string) string {
		// Some print their version and exit 1 (wrk -v): keep the output.
		out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
		if len(out) == 0 {
			return "?"
		}
		return firstLine(strings.TrimSpace(string(out)))
	}
	// Why: c's and d's CPU per GiB depend on it. BBR paces every
	// connection, and loopback has no fq qdisc, so TCP paces by a timer
	// per burst: under cubic, the fast servers' CPU per GiB fell 3–8×
	// (bench/RESULTS.md, "c and d under BBR and under cubic").
	cc := "?"
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control"); err == nil {
		cc = strings.TrimSpace(string(raw))
	}
	return fmt.Sprintf("%d × %s, %s RAM, Linux %s (TCP congestion control %s), %s; %s; %s; wrk %s",
		runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel)), cc, runtime.Version(),
		ver(lookPathOr("nginx"), "-v"), ver(lookPathOr("lighttpd"), "-v"), strings.Fields(ver("wrk", "-v") + " ?")[1])
}

func lookPathOr(name string) string {
	if p := lookPath(name); p != "" {
		return p
	}
	return name
}

func fmtValue(v float64, unit string) string {
	switch {
	case v == 0:
		return "–"
	case unit == "GB/s":
		return fmt.Sprintf("%.2f", v)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// residentCell is the resident % column: "–" where nothing was checked,
// the lowest percentage found, and "→ after" where files were read again.
func (r *result) residentCell() string {
	switch {
	case r.checked == 0:
		return "–"
	case r.reread == 0:
		return fmt.Sprintf("%.1f", r.lowBefore)
	}
	return fmt.Sprintf("%.1f → %.1f (%d of %d runs)", r.lowBefore, r.lowAfter, r.reread, r.checked)
}

// ratio is a's primary figure over b's on one workload: the median of the
// per-round ratios and their range (pairStats).
func ratio(res map[string]*result, a, b string) string {
	ra, rb := res[a], res[b]
	if ra == nil || rb == nil {
		return "–"
	}
	return pairStats(res, a, b).cell(max(len(ra.runs), len(rb.runs)))
}

// report renders the Markdown table.
func report(cfg *config, ws []workload, names []string, results map[string]map[string]*result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results (%s run)\n\n", cfg.mode)
	fmt.Fprintf(&b, "- Date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %s\n", machine())
	fmt.Fprintf(&b, "- RLIMIT_NOFILE of every server: %d; nginx `open_file_cache max=%d`; lighttpd `server.max-fds = 16384` and its default stat cache.\n", noFile, openFileCacheMax())
	fmt.Fprintf(&b, "- Command: `%s`\n", strings.TrimSpace(cfg.command))
	fmt.Fprintf(&b, "- Servers pinned to CPU 0, load generators to CPU 1; loopback. Each figure is the median of %d "+
		"runs of %s, servers interleaved in rounds (A B C, B C A, C A B, …: one run of each server a round, each round starting one server further). "+
		"Spread is (max−min)/median of one server's runs. "+
		"req/s counts successful responses only (404s in g and g2 are the expected answer).\n",
		cfg.runs, cfg.duration)
	b.WriteString("- Ratios: for each round, flash_serve's figure over the other server's figure of the same round (a few runs apart at most, " +
		"under about the same state of the machine); the table gives the median of those per-round ratios and, in brackets, " +
		"the smallest and largest of them. That range, not the two servers' spreads, is how uncertain the comparison is.\n")
	fmt.Fprintf(&b, "- Syscalls per request: `perf stat -e raw_syscalls:sys_enter -p PID` over `h2load --h1 -n %d -c 16`. "+
		"Threads and RSS: the peak sampled from /proc/PID/status during the workload.\n", cfg.syscallRequests)
	b.WriteString("- Resident %: before every run of a warm workload, `caddy flash-serve residency` (mincore) over the files it reads; " +
		"the lowest percentage found, and after → the lowest after the files were read again (`flash-serve prewarm`) where this VM had dropped pages. " +
		"CPU s/GiB: the server's user+system time (/proc/PID/stat, all threads) during the run, per GiB of body received.\n")
	b.WriteString("- Peers: `nginx` is nginx's default config with sendfile and open_file_cache; `nginx_aio` adds `thread_pool` of 32 threads, " +
		"`aio threads; directio off` (f, i, j); `respond`, `respond_headers`, `respond_8k` and `respond_404` are Caddy's ceiling in the same binary: " +
		"`respond` with a 1 KiB body (a), `respond_headers` the same with the header lines a file's answer has beside Content-Type " +
		"(Accept-Ranges, Etag, Last-Modified, Vary; a), `respond_8k` the same header lines with a body as long as each file of the many tree " +
		"(8 KiB; e and f: the same URIs, no lookup, no read), `respond 404` (g, g2); `error_404` is `error 404` (g, g2): the same empty 404 " +
		"returned as an error, as file_server returns a missing file's, so that `handle_errors` sees it, through Caddy's error path with no lookup.\n")
	b.WriteString("- g asks for a fixed list of 50,000 missing names over and over (a negative cache answers most of it); g2 asks, on every request, " +
		"for a name no request of the run asked before (a wrk script makes each name from a tag new for every run and a counter), spread over " +
		"the many tree's directories as g's are.\n\n")
	if cfg.mode == "smoke" {
		b.WriteString("Smoke mode: one short request burst per server and workload, small data; the figures mean nothing.\n\n")
	}
	b.WriteString("| workload | server | median | unit | MB/s | p50 ms | p99 ms | spread | syscalls/req | CPU s/GiB | resident % | peak threads | peak RSS MiB | note |\n")
	b.WriteString("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, w := range ws {
		res := results[w.id]
		for _, name := range serverNames(names, res) {
			r := res[name]
			sys := "–"
			if r.syscalls > 0 {
				sys = fmt.Sprintf("%.1f", r.syscalls)
			} else if r.sysErr != "" {
				sys = "n/a"
			}
			note := r.err
			if fps := r.median(func(m measurement) float64 { return m.filesPS }); fps > 0 {
				note = strings.TrimSpace(fmt.Sprintf("%.0f files/s %s", fps, note))
			}
			errs := 0
			for _, m := range r.runs {
				errs += m.errors
			}
			if errs > 0 {
				note = strings.TrimSpace(fmt.Sprintf("%s %d failed responses", note, errs))
			}
			lat := func(f func(measurement) float64) string {
				v := r.median(f)
				if v == 0 {
					return "–"
				}
				return fmt.Sprintf("%.2f", v)
			}
			cpu := "–"
			if v := r.cpuPerGiB(); w.cpuPerGiB && v > 0 {
				cpu = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(&b, "| %s %s | %s | %s | %s | %.0f | %s | %s | %.0f%% | %s | %s | %s | %d | %.0f | %s |\n",
				w.id, w.title, name,
				fmtValue(r.median(func(m measurement) float64 { return m.value }), w.unit), w.unit,
				r.median(func(m measurement) float64 { return m.mbps }),
				lat(func(m measurement) float64 { return m.p50 }), lat(func(m measurement) float64 { return m.p99 }),
				r.spread(), sys, cpu, r.residentCell(), r.threads, float64(r.rssKB)/1024, html.EscapeString(note))
		}
	}
	b.WriteString("\n## Ratios (the median of the per-round ratios of the primary figure, their min–max in brackets)\n\n")
	b.WriteString("| workload | flash_serve / file_server | flash_serve / Caddy's ceiling (respond, respond_headers, respond_8k, respond_404, error_404) | flash_serve / nginx | flash_serve / nginx_aio | flash_serve / lighttpd | CPU s/GiB flash_serve / nginx (medians) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, w := range ws {
		res := results[w.id]
		// Each ceiling by name: a has two (with and without a file's
		// headers), e and f respond_8k, g and g2 two (respond_404, and
		// error_404 through Caddy's error path as file_server's 404).
		var ceilings []string
		for _, c := range []string{"respond", "respond_headers", "respond_8k", "respond_404", "error_404"} {
			if res[c] != nil {
				ceilings = append(ceilings, c+" "+ratio(res, "flash_serve", c))
			}
		}
		ceiling := "–"
		if len(ceilings) > 0 {
			ceiling = strings.Join(ceilings, "; ")
		}
		cpu := "–"
		if f, n := res["flash_serve"], res["nginx"]; w.cpuPerGiB && f != nil && n != nil && f.cpuPerGiB() > 0 && n.cpuPerGiB() > 0 {
			cpu = fmt.Sprintf("%.2f×", f.cpuPerGiB()/n.cpuPerGiB())
		}
		fmt.Fprintf(&b, "| %s %s | %s | %s | %s | %s | %s | %s |\n", w.id, w.title,
			ratio(res, "flash_serve", "file_server"), ceiling,
			ratio(res, "flash_serve", "nginx"), ratio(res, "flash_serve", "nginx_aio"), ratio(res, "flash_serve", "lighttpd"), cpu)
	}
	if j := results["j"]; j != nil && results["e"] != nil {
		warm := results["e"]["flash_serve"]
		if warm != nil {
			w := warm.median(func(m measurement) float64 { return m.value })
			b.WriteString("\n## Restart (j) against the warm figure (e)\n\n")
			for _, name := range serverNames(nil, j) {
				v := j[name].median(func(m measurement) float64 { return m.value })
				if w > 0 && v > 0 {
					fmt.Fprintf(&b, "- %s: the first %s after a restart on a cold page cache reach %.0f%% of flash_serve's warm e figure.\n",
						name, cfg.restartWindow, 100*v/w)
				}
			}
		}
	}
	return b.String()
}

// serverNames lists the servers of one workload: those of names first, in
// their order, then any others the workload has (j and k have their own).
func serverNames(names []string, res map[string]*result) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if res[n] != nil {
			out = append(out, n)
			seen[n] = true
		}
	}
	var extra []string
	for n := range res {
		if !seen[n] {
			extra = append(extra, n)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

var serverColours = map[string]string{
	"flash_serve": "#d9480f", "file_server": "#1c7ed6", "respond": "#868e96", "nginx": "#2b8a3e", "lighttpd": "#7048e8",
	"nginx_aio": "#74b816", "respond_404": "#adb5bd", "error_404": "#a61e4d", "respond_headers": "#495057", "respond_8k": "#ced4da",
	"flash_serve+prewarm": "#f59f00", "flash_serve+prewarm_many": "#ffd43b", "flash-serve prewarm": "#f59f00", "cat": "#495057",
}

// chart renders one group per workload, one bar per server, each group
// scaled to its best server, with the value written on the bar.
func chart(cfg *config, ws []workload, names []string, results map[string]map[string]*result) string {
	const (
		barW, top, plotH, left, legendW = 24, 60, 260, 40, 150
	)
	// Each group is wide enough for its bars (a has six, f seven).
	bars := 0
	for _, w := range ws {
		bars = max(bars, len(results[w.id]))
	}
	groupW := max(150, bars*(barW+2)+20)
	width := max(left+groupW*len(ws)+20, 700)
	perRow := max(1, (width-left)/legendW)
	legendRows := (len(names) + perRow - 1) / perRow
	height := top + plotH + 70 + 18*legendRows
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">flash_serve vs file_server, respond, nginx, lighttpd (%s run, %s)</text>`+"\n",
		left, cfg.mode, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, `<text x="%d" y="38" fill="#555">Bars are scaled to the best server of each workload; labels are medians (req/s, or GB/s for c, d, h1).</text>`+"\n", left)
	for i, name := range names {
		x, y := left+(i%perRow)*legendW, top+plotH+52+18*(i/perRow)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, y, serverColours[name], x+16, y+10, name)
	}
	base := top + plotH
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, base, width-10, base)
	for gi, w := range ws {
		res := results[w.id]
		best := 0.0
		for _, r := range res {
			best = max(best, r.median(func(m measurement) float64 { return m.value }))
		}
		gx := left + gi*groupW + 10
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", gx, base+16, w.id)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="9">%s</text>`+"\n", gx, base+30, html.EscapeString(truncate(w.title, 28)))
		bi := 0
		for _, name := range serverNames(names, res) {
			r := res[name]
			v := r.median(func(m measurement) float64 { return m.value })
			h := 0
			if best > 0 {
				h = int(float64(plotH) * v / best)
			}
			x := gx + bi*(barW+2)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s: %s %s</title></rect>`+"\n",
				x, base-h, barW, h, serverColours[name], w.id, name, fmtValue(v, w.unit), w.unit)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="9" transform="rotate(-90 %d %d)">%s</text>`+"\n",
				x+barW/2+3, base-h-4, x+barW/2+3, base-h-4, fmtValue(v, w.unit))
			bi++
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
