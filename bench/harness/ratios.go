//go:build linux

package main

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// headline is a workload of the README's chart: flash_serve's median
// against file_server's and against the better of nginx's two configs.
type headline struct{ id, label string }

var headlines = []headline{
	{"a", "1 KiB hot"},
	{"c", "1 GiB, one stream"},
	{"e", "100k × 8 KiB, warm"},
	{"f", "100k × 8 KiB, cold"},
	{"g", "404 storm"},
}

// headlineRatios returns, for each headline workload that ran, flash_serve
// over file_server and over the best nginx (0 where either is missing).
func headlineRatios(results map[string]map[string]*result) (hs []headline, vsFS, vsNginx []float64) {
	med := func(r *result) float64 {
		if r == nil {
			return 0
		}
		return r.median(func(m measurement) float64 { return m.value })
	}
	for _, h := range headlines {
		res := results[h.id]
		if res == nil {
			continue
		}
		fs := med(res["flash_serve"])
		over := func(v float64) float64 {
			if fs == 0 || v == 0 {
				return 0
			}
			return fs / v
		}
		hs = append(hs, h)
		vsFS = append(vsFS, over(med(res["file_server"])))
		vsNginx = append(vsNginx, over(max(med(res["nginx"]), med(res["nginx_aio"]))))
	}
	return hs, vsFS, vsNginx
}

// ratioChart renders the headline ratios as horizontal bars on one scale,
// with a line at 1×: small enough for the README.
func ratioChart(cfg *config, results map[string]map[string]*result) string {
	hs, vsFS, vsNginx := headlineRatios(results)
	const left, barH, rowH, plotW, top = 150, 11, 34, 360, 40
	scale := 1.0
	for i := range hs {
		scale = max(scale, vsFS[i], vsNginx[i])
	}
	width, height := left+plotW+70, top+rowH*len(hs)+30
	x := func(v float64) int { return left + int(float64(plotW)*v/scale) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="10" y="16" font-size="13" font-weight="bold">flash_serve's req/s or GB/s over its peers (%s run, %s)</text>`+"\n",
		cfg.mode, time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, `<rect x="10" y="24" width="10" height="10" fill="#1c7ed6"/><text x="24" y="33">× file_server</text>`+"\n")
	fmt.Fprintf(&b, `<rect x="120" y="24" width="10" height="10" fill="#2b8a3e"/><text x="134" y="33">× nginx (aio threads for f)</text>`+"\n")
	for i, h := range hs {
		y := top + i*rowH
		fmt.Fprintf(&b, `<text x="10" y="%d">%s  %s</text>`+"\n", y+14, h.id, html.EscapeString(h.label))
		for j, v := range []float64{vsFS[i], vsNginx[i]} {
			colour := []string{"#1c7ed6", "#2b8a3e"}[j]
			by := y + 3 + j*(barH+2)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, by, x(v)-left, barH, colour)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">%.2f×</text>`+"\n", x(v)+4, by+barH-1, v)
		}
	}
	one := x(1)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333" stroke-dasharray="3,2"/>`+"\n", one, top-2, one, top+rowH*len(hs))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">1×</text>`+"\n", one-6, top+rowH*len(hs)+12)
	b.WriteString("</svg>\n")
	return b.String()
}
