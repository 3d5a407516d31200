//go:build linux

package main

import (
	"fmt"
	"html"
	"slices"
	"strings"
	"time"
)

// pairStat sums up one server's figure over another's, round by round.
// The runs of one round follow each other (measureWorkload runs every
// server once a round, each round starting one server further), so the
// two runs of a pair are a few runs apart at most and see about the same state of the machine, and their ratio cancels what drifts from
// one round to the next: another process's load, the host's page cache,
// this VM's CPU. The ratio of two separate medians does not, and their two
// spreads overstate how uncertain the comparison is.
type pairStat struct {
	// med is the median of the per-round ratios, lo and hi their
	// smallest and largest, n how many rounds both servers measured.
	med, lo, hi float64
	n           int
}

// pairStats pairs the runs of a and b of one workload by round; n is 0
// where either server is missing or no round measured both.
func pairStats(res map[string]*result, a, b string) pairStat {
	ra, rb := res[a], res[b]
	if ra == nil || rb == nil {
		return pairStat{}
	}
	ofB := map[int]float64{}
	for _, m := range rb.runs {
		if m.value > 0 {
			ofB[m.round] = m.value
		}
	}
	var xs []float64
	for _, m := range ra.runs {
		if v := ofB[m.round]; v > 0 && m.value > 0 {
			xs = append(xs, m.value/v)
		}
	}
	if len(xs) == 0 {
		return pairStat{}
	}
	return pairStat{med: median(xs), lo: slices.Min(xs), hi: slices.Max(xs), n: len(xs)}
}

// cell renders the pair statistics for a table: "0.93× (0.88–0.97)", with
// the number of pairs where it is below want (a run failed).
func (p pairStat) cell(want int) string {
	switch {
	case p.n == 0:
		return "–"
	case p.n == 1:
		return fmt.Sprintf("%.2f× (1 pair)", p.med)
	case p.n < want:
		return fmt.Sprintf("%.2f× (%.2f–%.2f, %d pairs)", p.med, p.lo, p.hi, p.n)
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", p.med, p.lo, p.hi)
}

// ceilingOf names the server that is Caddy's ceiling for one workload's
// answer, "" if it has none: respond 404 for the 404 workloads, respond
// with an 8 KiB body for the many tree, respond with a file's headers (or
// without them) for the 1 KiB file.
func ceilingOf(res map[string]*result) string {
	for _, name := range []string{"respond_404", "respond_8k", "respond_headers", "respond"} {
		if res[name] != nil {
			return name
		}
	}
	return ""
}

// bestNginx is the nginx config with the higher median on one workload.
func bestNginx(res map[string]*result) string {
	med := func(name string) float64 {
		if r := res[name]; r != nil {
			return r.median(func(m measurement) float64 { return m.value })
		}
		return 0
	}
	if med("nginx_aio") > med("nginx") {
		return "nginx_aio"
	}
	return "nginx"
}

// headline is a workload of the README's chart: flash_serve against
// file_server, against Caddy's ceiling for the same answer and against the
// better of nginx's two configs.
type headline struct{ id, label string }

var headlines = []headline{
	{"a", "1 KiB hot"},
	{"c", "1 GiB, one stream"},
	{"e", "100k × 8 KiB, warm"},
	{"f", "100k × 8 KiB, cold"},
	{"g", "404 storm"},
	{"g2", "404s, each name new"},
}

// headlineSeries are the bars of each headline workload, in order.
var headlineSeries = []struct{ label, colour string }{
	{"× file_server", "#1c7ed6"},
	{"× Caddy's ceiling (respond)", "#868e96"},
	{"× nginx (the better config)", "#2b8a3e"},
}

// headlineRatios returns, for each headline workload that ran, flash_serve
// over file_server, over Caddy's ceiling and over the best nginx, as pair
// statistics (n 0 where a server is missing).
func headlineRatios(results map[string]map[string]*result) (hs []headline, ratios [][3]pairStat) {
	for _, h := range headlines {
		res := results[h.id]
		if res == nil {
			continue
		}
		var row [3]pairStat
		row[0] = pairStats(res, "flash_serve", "file_server")
		if c := ceilingOf(res); c != "" {
			row[1] = pairStats(res, "flash_serve", c)
		}
		row[2] = pairStats(res, "flash_serve", bestNginx(res))
		hs = append(hs, h)
		ratios = append(ratios, row)
	}
	return hs, ratios
}

// ratioChart renders the headline ratios as horizontal bars on one scale,
// with a line at 1×: each bar is the median of the per-round ratios, the
// thin line across it their range: small enough for the README.
func ratioChart(cfg *config, results map[string]map[string]*result) string {
	hs, ratios := headlineRatios(results)
	const left, barH, plotW, top = 150, 11, 360, 40
	rowH := len(headlineSeries)*(barH+2) + 8
	scale := 1.0
	for _, row := range ratios {
		for _, p := range row {
			scale = max(scale, p.hi)
		}
	}
	width, height := left+plotW+70, top+rowH*len(hs)+40
	x := func(v float64) int { return left + int(float64(plotW)*v/scale) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="10" y="16" font-size="13" font-weight="bold">flash_serve's req/s or GB/s over its peers (%s run, %s)</text>`+"\n",
		cfg.mode, time.Now().UTC().Format("2006-01-02"))
	lx := 10
	for _, s := range headlineSeries {
		fmt.Fprintf(&b, `<rect x="%d" y="24" width="10" height="10" fill="%s"/><text x="%d" y="33">%s</text>`+"\n",
			lx, s.colour, lx+14, html.EscapeString(s.label))
		lx += 14 + 7*len([]rune(s.label)) + 12
	}
	for i, h := range hs {
		y := top + i*rowH
		fmt.Fprintf(&b, `<text x="10" y="%d">%s  %s</text>`+"\n", y+14, h.id, html.EscapeString(h.label))
		for j, p := range ratios[i] {
			by := y + 3 + j*(barH+2)
			if p.n == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">–</text>`+"\n", left+4, by+barH-1)
				continue
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, by, x(p.med)-left, barH, headlineSeries[j].colour)
			if p.n > 1 {
				fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", x(p.lo), by+barH/2, x(p.hi), by+barH/2)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">%.2f×</text>`+"\n", max(x(p.med), x(p.hi))+4, by+barH-1, p.med)
		}
	}
	one := x(1)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-dasharray="3,2"/>`+"\n", one, top-2, one, top+rowH*len(hs))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">1×</text>`+"\n", one-6, top+rowH*len(hs)+12)
	fmt.Fprintf(&b, `<text x="10" y="%d" font-size="10" fill="#555">Bars: the median of the per-round ratios (runs of one round follow each other); lines: their range.</text>`+"\n",
		top+rowH*len(hs)+28)
	b.WriteString("</svg>\n")
	return b.String()
}
