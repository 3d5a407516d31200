package flashserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// pageFigure is one figure of the status page: the JSON path of
// /flash_serve/stats it shows, its exact value, and its text.
type pageFigure struct{ path, value, text string }

var pageFigureRE = regexp.MustCompile(`<span class="v" data-stat="([^"]+)" data-value="([^"]*)">([^<]*)</span>`)

// pageFigures finds the figures of a status page, as served or as a
// browser's DOM serializes it.
func pageFigures(page string) []pageFigure {
	var out []pageFigure
	for _, m := range pageFigureRE.FindAllStringSubmatch(page, -1) {
		out = append(out, pageFigure{html.UnescapeString(m[1]), html.UnescapeString(m[2]), html.UnescapeString(m[3])})
	}
	return out
}

// jsonAt finds the value at a dotted path (keys, and indexes of arrays)
// in decoded JSON.
func jsonAt(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// checkPageAgainstStats checks every figure of page against the JSON of
// /flash_serve/stats: its value is the JSON's (null for none), and a
// count shown as a plain number shows that number. It fails for a page
// without the figures of required, and returns the figures.
func checkPageAgainstStats(t *testing.T, page string, statsJSON []byte, required ...string) map[string]pageFigure {
	t.Helper()
	var stats map[string]any
	if err := json.Unmarshal(statsJSON, &stats); err != nil {
		t.Fatalf("stats: %v\n%s", err, statsJSON)
	}
	figs := map[string]pageFigure{}
	for _, f := range pageFigures(page) {
		figs[f.path] = f
		want, ok := jsonAt(stats, f.path)
		if !ok {
			t.Errorf("the page shows %s, which /flash_serve/stats does not have", f.path)
			continue
		}
		switch w := want.(type) {
		case nil:
			if f.value != "" {
				t.Errorf("%s: the page says %q, the JSON null", f.path, f.value)
			}
		case float64:
			got, err := strconv.ParseFloat(f.value, 64)
			if err != nil || got != w {
				t.Errorf("%s: the page says %q (%q), the JSON %v", f.path, f.value, f.text, w)
			}
			if plain := strings.ReplaceAll(f.text, ",", ""); regexp.MustCompile(`^[0-9]+$`).MatchString(plain) && plain != f.value {
				t.Errorf("%s: the page shows %q for %s", f.path, f.text, f.value)
			}
		default:
			t.Errorf("%s: the JSON has %T %v, not a number", f.path, want, want)
		}
	}
	for _, p := range required {
		if _, ok := figs[p]; !ok {
			t.Errorf("the page has no figure %s", p)
		}
	}
	return figs
}

// statusFigures are the figures the page must show, per-site ones aside.
var statusFigures = []string{
	"lookups.hit_ratio", "lookups.hits", "lookups.negative_hits", "lookups.misses", "lookups.merged",
	"engines.memory.bytes", "engines.sendfile.bytes", "engines.io_uring.bytes", "engines.copy.bytes",
	"engines.memory.requests", "cache.open_files", "cache.max_open_files", "cache.negative_entries",
	"cache.max_negative_entries", "cache.memory_bytes", "cold_reads.buffer_bytes", "cold_reads.buffer_limit",
	"prewarm.hot_set_bytes", "prewarm.hot_set_resident_bytes", "prewarm.hot_set_unknown_bytes",
	"transfers_in_flight", "rejected.max_transfers", "cache_instances.0.entries", "cache_instances.0.open_files",
}

// twoSites serves two roots, each through its own flash_serve site (with
// one cache, as their settings are the same), with an admin endpoint and
// a third site proxying the status page to it: the one docs/metrics.md
// gives.
// It returns the two sites' addresses, the admin endpoint's and the
// status site's, and the roots.
func twoSites(t *testing.T) (site1, site2, admin, status, root1, root2 string) {
	t.Helper()
	root1, root2 = t.TempDir(), t.TempDir()
	for _, f := range []struct{ root, name, body string }{
		{root1, "a.txt", "site one\n"}, {root1, "big.bin", strings.Repeat("0123456789abcdef", 64<<10)},
		{root2, "b.txt", "site two\n"},
	} {
		if err := os.WriteFile(filepath.Join(f.root, f.name), []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	adminPort, p1, p2, ps := freePort(t), freePort(t), freePort(t), freePort(t)
	admin = fmt.Sprintf("127.0.0.1:%d", adminPort)
	statusSite := strings.NewReplacer("http://127.0.0.1:8081", fmt.Sprintf("http://127.0.0.1:%d", ps), "localhost:2019", admin).Replace(statusProxyRecipe(t))
	loadSites(t, "admin "+admin+"\n\tmetrics",
		siteBlock(p1, root1, flashServe())+siteBlock(p2, root2, flashServe())+statusSite)
	return fmt.Sprintf("http://127.0.0.1:%d", p1), fmt.Sprintf("http://127.0.0.1:%d", p2), "http://" + admin,
		fmt.Sprintf("http://127.0.0.1:%d", ps), root1, root2
}

// statusProxyRecipe is the site of docs/metrics.md that proxies the
// status page from the admin endpoint: the first caddy block of its
// "Status page" section.
func statusProxyRecipe(t *testing.T) string {
	t.Helper()
	docs, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(docs), "## Status page")
	_, recipe, ok2 := strings.Cut(section, "```caddy\n")
	recipe, _, ok3 := strings.Cut(recipe, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/metrics.md has no caddy block in its Status page section")
	}
	return recipe
}

// visitTwoSites makes known lookups on the two sites: on the first, one
// miss then three hits of a.txt and a miss then two hits of big.bin; on
// the second, one miss then two "no such file" hits of missing.txt.
func visitTwoSites(t *testing.T, site1, site2 string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	for _, v := range []struct {
		url    string
		times  int
		status int
	}{{site1 + "/a.txt", 4, 200}, {site1 + "/big.bin", 3, 200}, {site2 + "/missing.txt", 3, 404}} {
		for range v.times {
			if status, _, b := get(t, c, v.url); status != v.status {
				t.Fatalf("GET %s: %d %s, want %d", v.url, status, b, v.status)
			}
		}
	}
	c.CloseIdleConnections()
}

// steadyStats fetches /flash_serve/stats, then page() and the stats again,
// until both stats are the same: page saw the stats of the JSON.
func steadyStats(t *testing.T, admin string, page func() string) (string, []byte) {
	t.Helper()
	var p string
	var before []byte
	eventually(t, 10*time.Second, func() error {
		var status int
		status, before = adminCall(t, "GET", admin+"/flash_serve/stats", "")
		p = page()
		_, after := adminCall(t, "GET", admin+"/flash_serve/stats", "")
		if status != 200 || !bytes.Equal(before, after) {
			return fmt.Errorf("the stats kept changing: %d %s\nthen %s", status, before, after)
		}
		return nil
	})
	return p, before
}

// siteIndex finds a site's index in /flash_serve/stats by its root.
func siteIndex(t *testing.T, statsJSON []byte, root string) int {
	t.Helper()
	var st Stats
	if err := json.Unmarshal(statsJSON, &st); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Sites, func(s SiteStats) bool { return s.Root == root })
	if i < 0 {
		t.Fatalf("no site with root %s in %s", root, statsJSON)
	}
	return i
}

// TestStatusPageFiguresMatchStats: GET /flash_serve/ with Accept:
// text/html is the status page, whose every figure is the one of
// /flash_serve/stats, each site's lookups counted apart though both sites
// share one cache; without text/html it answers the JSON of the stats.
func TestStatusPageFiguresMatchStats(t *testing.T) {
	site1, site2, admin, _, root1, root2 := twoSites(t)
	visitTwoSites(t, site1, site2)

	var header http.Header
	page, statsJSON := steadyStats(t, admin, func() string {
		req, _ := http.NewRequest("GET", admin+"/flash_serve/", nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /flash_serve/ as a browser: %d %s", resp.StatusCode, b.String())
		}
		header = resp.Header
		return b.String()
	})
	if ct := header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if csp := header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q: the page must load nothing", csp)
	}
	for _, external := range []string{"<script", "<link", "src=", "@import", "url("} {
		if strings.Contains(page, external) {
			t.Errorf("the page has %q: it must be self-contained", external)
		}
	}
	i1, i2 := siteIndex(t, statsJSON, root1), siteIndex(t, statsJSON, root2)
	s1, s2 := fmt.Sprintf("sites.%d.", i1), fmt.Sprintf("sites.%d.", i2)
	figs := checkPageAgainstStats(t, page, statsJSON, append(slices.Clip(statusFigures),
		s1+"hits", s1+"misses", s1+"negative_hits", s1+"hit_ratio", s2+"hits", s2+"misses", s2+"negative_hits", s2+"hit_ratio")...)
	for path, want := range map[string]string{
		s1 + "hits": "5", s1 + "misses": "2", s1 + "negative_hits": "0", s1 + "hit_ratio": "0.7142857142857143",
		s2 + "hits": "0", s2 + "misses": "1", s2 + "negative_hits": "2",
	} {
		if got := figs[path].value; got != want {
			t.Errorf("%s = %s, want %s (the lookups made on that site)", path, got, want)
		}
	}
	if n := len(figs); n < 40 {
		t.Errorf("the page shows %d figures", n)
	}

	// A program: no text/html in Accept.
	for _, accept := range []string{"", "*/*", "application/json", "text/html;q=0"} {
		req, _ := http.NewRequest("GET", admin+"/flash_serve/", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st Stats
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || err != nil || len(st.Sites) < 2 {
			t.Errorf("Accept %q: %d %s (%v), %d sites; want the JSON of /flash_serve/stats", accept, resp.StatusCode, resp.Header.Get("Content-Type"), err, len(st.Sites))
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{{"POST", "/flash_serve/", 405}, {"GET", "/flash_serve/nothing", 404}, {"GET", "/flash_serve/?refresh=0", 400}} {
		req, _ := http.NewRequest(c.method, admin+c.path, nil)
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
}

// samplerGoroutines counts the goroutines running the status page's
// sampler.
func samplerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "caddy-flash-serve.(*sampler).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestSamplerRunsOnceWhileHandlersDo: the status page's sampler is one
// goroutine while any flash_serve handler is provisioned, the same one
// (keeping its samples) across reloads, even of every cache setting, and
// none once no handler is left, after a reload to a config without one or
// a stop.
func TestSamplerRunsOnceWhileHandlersDo(t *testing.T) {
	defer func(d time.Duration) { sampleEvery = d }(sampleEvery)
	sampleEvery = 20 * time.Millisecond
	waitFor(t, "no sampler before the test", 10*time.Second, func() bool { return samplerGoroutines() == 0 && currentSampler() == nil })

	root := t.TempDir()
	port := freePort(t)
	with := func(opts ...string) string { return siteBlock(port, root, flashServe(opts...)) }
	// one waits for the sampler's goroutine, which a goroutine dump lists
	// once it is scheduled.
	one := func(when string) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			if n := samplerGoroutines(); n != 1 {
				return fmt.Errorf("%s: %d sampler goroutines, want 1", when, n)
			}
			return nil
		})
	}
	loadSites(t, "", with())
	first := currentSampler()
	if first == nil {
		t.Fatal("no sampler with a handler")
	}
	one("with a handler")
	waitFor(t, "a few samples", 10*time.Second, func() bool { return len(first.samples()) >= 3 })
	for i, opts := range [][]string{{"max_open_files 500"}, {"negative_cache 100"}, {"max_open_files 600", "memory_cache 1MiB"}, nil} {
		kept := len(first.samples())
		loadSites(t, "", with(opts...))
		if now := currentSampler(); now != first || len(now.samples()) < kept {
			t.Fatalf("reload %d (%v): sampler %p (was %p) with %d samples (had %d); want the same one, still sampling",
				i, opts, now, first, len(now.samples()), kept)
		}
		one(fmt.Sprintf("after reload %d (%v)", i, opts))
	}
	// A config without a flash_serve handler stops it.
	loadSites(t, "", siteBlock(port, "", "respond ok"))
	waitFor(t, "the sampler to stop with the last handler", 10*time.Second, func() bool { return samplerGoroutines() == 0 })
	if s := currentSampler(); s != nil {
		t.Errorf("sampler %p left with no handler", s)
	}
	// So does a stop.
	loadSites(t, "", with())
	one("after a handler came back")
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sampler to stop with Caddy", 10*time.Second, func() bool { return samplerGoroutines() == 0 && currentSampler() == nil })
}

// TestMetricNamesWithDeprecatedAliases: /metrics has every metric under
// its name, with a HELP line and a TYPE, and each deprecated name of 0.1.0
// with the value of the series that replaces it; docs/metrics.md lists
// them all.
func TestMetricNamesWithDeprecatedAliases(t *testing.T) {
	site1, site2, admin, _, _, _ := twoSites(t)
	visitTwoSites(t, site1, site2)
	status, b := adminCall(t, "GET", admin+"/metrics", "")
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, b)
	}
	text := string(b)
	docs, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	nameRE := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	deprecated := 0
	for _, metric := range metrics {
		d := metric.desc
		m := nameRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		name := m[1]
		names[name] = true
		help := regexp.MustCompile(`(?m)^# HELP ` + regexp.QuoteMeta(name) + ` (.+)$`).FindStringSubmatch(text)
		if help == nil || !regexp.MustCompile(`(?m)^# TYPE `+regexp.QuoteMeta(name)+` (counter|gauge)$`).MatchString(text) {
			t.Errorf("%s: no HELP or no TYPE line in /metrics", name)
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? `).MatchString(text) {
			t.Errorf("%s: no sample in /metrics", name)
		}
		if !strings.Contains(string(docs), "`"+name) {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
		if isDeprecated := metric.replacedBy != ""; isDeprecated != (help != nil && strings.HasPrefix(help[1], "Deprecated: ")) {
			t.Errorf("%s: HELP %q; deprecated: %v", name, help, isDeprecated)
		} else if isDeprecated {
			deprecated++
		}
	}
	if deprecated != 15 {
		t.Errorf("%d deprecated names, want the 14 statacc_* and bytes_total", deprecated)
	}
	// Each alias has the value of its replacement (one scrape reads both
	// from one snapshot), for every label of the alias.
	sampleRE := regexp.MustCompile(`(?m)^(caddy_flash_serve_[a-z_]+)(\{[^}]*\})? (\S+)$`)
	samples := map[string]string{}
	for _, m := range sampleRE.FindAllStringSubmatch(text, -1) {
		samples[m[1]+m[2]] = m[3]
	}
	for _, metric := range metrics {
		replacement := metric.replacedBy
		if replacement == "" {
			continue
		}
		old := nameRE.FindStringSubmatch(metric.desc.String())[1]
		newName, newLabels, _ := strings.Cut(replacement, "{")
		if !names[metricsNamespace+newName] {
			t.Errorf("%s is replaced by %s, which is not exported", old, newName)
		}
		found := 0
		for series, v := range samples {
			name, labels, _ := strings.Cut(series, "{")
			if name != old {
				continue
			}
			found++
			want := metricsNamespace + newName
			switch {
			case newLabels != "" && labels == "":
				want += "{" + newLabels
			case newLabels == "" && labels != "":
				want += "{" + labels
			case newLabels != "":
				t.Fatalf("%s: both have labels", old)
			}
			if got, ok := samples[want]; !ok || got != v {
				t.Errorf("%s = %s, but %s = %q (present: %v)", series, v, want, got, ok)
			}
		}
		if found == 0 {
			t.Errorf("no sample of %s", old)
		}
	}
}
