package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Markers of what lies outside the root in confinementTree: no response
// of a confined site may carry either, in its body or its headers.
const (
	outsideName  = "OUTSIDE-q7z"
	outsideBytes = "LEAKED-q7z"
)

// linkKinds are the links confinementTree puts on every path a request can
// take, by the target they get when placed one directory below the root:
// absolute, relative and leaving the root, the root's parent directory,
// and a link to itself.
var linkKinds = []string{"abs", "rel", "dotdot", "loop"}

func linkTarget(kind, outside, name, file string) string {
	switch kind {
	case "abs":
		return filepath.Join(outside, file)
	case "rel":
		return "../../" + outsideName + "/" + file
	case "dotdot":
		return "../.."
	}
	return name // loop
}

// confinementTree builds a root whose every link kind sits as an index
// file (idx-K/index.html), a precompressed sidecar (sc-K/page.txt.gz), an
// ETag file (et-K/page.txt.etag) and a listed entry (ls-K/link-K, beside
// plain.txt and inner-link, a link to it), with the outside directory
// beside the root.
func confinementTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "site")
	outside := filepath.Join(base, outsideName)
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "leak.txt"), outsideBytes+" file\n")
	write(filepath.Join(outside, "leak.txt.gz"), outsideBytes+" sidecar\n")
	write(filepath.Join(outside, "leak.etag"), `"`+outsideBytes+`-etag"`)
	for _, k := range linkKinds {
		write(filepath.Join(root, "idx-"+k, ".keep"), "")
		link(linkTarget(k, outside, "index.html", "leak.txt"), filepath.Join(root, "idx-"+k, "index.html"))
		write(filepath.Join(root, "sc-"+k, "page.txt"), "inside page\n")
		link(linkTarget(k, outside, "page.txt.gz", "leak.txt.gz"), filepath.Join(root, "sc-"+k, "page.txt.gz"))
		write(filepath.Join(root, "et-"+k, "page.txt"), "inside page\n")
		link(linkTarget(k, outside, "page.txt.etag", "leak.etag"), filepath.Join(root, "et-"+k, "page.txt.etag"))
		write(filepath.Join(root, "ls-"+k, "plain.txt"), "inside plain\n")
		link("plain.txt", filepath.Join(root, "ls-"+k, "inner-link"))
		link(linkTarget(k, outside, "link-"+k, "leak.txt"), filepath.Join(root, "ls-"+k, "link-"+k))
	}
	return root
}

// TestConfinementEveryPath requests every path a request can take to a
// link (index file, sidecar, ETag file, listed entry, the link itself)
// under symlinks deny and beneath, with browse on and off and with
// pass_thru: no outside byte or outside name is served, a refused index is
// a 403 (not a listing, a 404 or the next handler), a refused sidecar or
// ETag file is ignored, and a listing leaves out the links the mode
// refuses. A follow site shows that the links do lead outside.
func TestConfinementEveryPath(t *testing.T) {
	root := confinementTree(t)
	const opts = "precompressed gzip\netag_file_extensions .etag"
	variants := map[string]string{
		"browse": block("browse", "reveal_symlinks") + "\n" + opts,
		"plain":  opts,
		"pass":   "pass_thru\n" + opts,
	}
	ports := map[string]int{}
	var sites bytes.Buffer
	site := func(name, mode, variant string) {
		ports[name] = freePort(t)
		sites.WriteString(siteBlock(ports[name], root, block("route", flashServe("symlinks "+mode, variants[variant]), `respond "NEXT" 200`)))
	}
	for _, mode := range []string{"deny", "beneath"} {
		for variant := range variants {
			site(mode+"-"+variant, mode, variant)
		}
	}
	site("follow-browse", "follow", "browse")
	loadSites(t, "", sites.String())
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(c.CloseIdleConnections)

	fetch := func(t *testing.T, site, path string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", ports[site], path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s on %s: %v", path, site, err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		if _, err := body.ReadFrom(resp.Body); err != nil {
			t.Fatalf("GET %s on %s: reading the body: %v", path, site, err)
		}
		return resp.StatusCode, resp.Header, body.Bytes()
	}

	// The control: followed, the links reach the outside. Without it the
	// checks below would prove nothing, so the test stops if it fails.
	if !t.Run("follow control", func(t *testing.T) {
		if status, _, body := fetch(t, "follow-browse", "/idx-abs/"); status != 200 || !bytes.Contains(body, []byte(outsideBytes)) {
			t.Fatalf("follow /idx-abs/: %d %q; the fixture's index link does not lead outside", status, body)
		}
		if status, _, body := fetch(t, "follow-browse", "/idx-dotdot/"); status != 200 || !bytes.Contains(body, []byte(outsideName)) {
			t.Fatalf("follow /idx-dotdot/: %d %q; the fixture's parent link does not list the outside", status, body)
		}
		if _, h, _ := fetch(t, "follow-browse", "/sc-rel/page.txt"); h.Get("Content-Encoding") != "gzip" {
			t.Fatalf("follow /sc-rel/page.txt: no gzip sidecar; the fixture's sidecar link does not lead outside")
		}
	}) {
		t.FailNow()
	}
	// A looping sidecar is skipped in every mode, as file_server skips a
	// sidecar it cannot stat: the file itself is sent.
	if status, h, body := fetch(t, "follow-browse", "/sc-loop/page.txt"); status != 200 || h.Get("Content-Encoding") != "" || string(body) != "inside page\n" {
		t.Errorf("follow /sc-loop/page.txt: %d, Content-Encoding %q, body %q; want the file itself", status, h.Get("Content-Encoding"), body)
	}

	paths := map[string]func(kind string) string{
		"index":   func(k string) string { return "/idx-" + k + "/" },
		"sidecar": func(k string) string { return "/sc-" + k + "/page.txt" },
		"etag":    func(k string) string { return "/et-" + k + "/page.txt" },
		"listing": func(k string) string { return "/ls-" + k + "/" },
		"link":    func(k string) string { return "/ls-" + k + "/link-" + k },
	}
	checked := 0
	for _, mode := range []string{"deny", "beneath"} {
		for variant := range variants {
			name := mode + "-" + variant
			t.Run(name, func(t *testing.T) {
				for what, pathOf := range paths {
					for _, kind := range linkKinds {
						path := pathOf(kind)
						w := confinedAnswer(t, mode, variant, kind, what)
						// Twice: the second answer comes from the cache.
						for round := range 2 {
							status, h, body := fetch(t, name, path)
							checked++
							w.check(t, fmt.Sprintf("%s %s (%s link, round %d)", name, path, kind, round), status, h, body)
						}
					}
				}
			})
		}
	}
	t.Logf("%d responses checked", checked)
}

// confinedWant is the answer a confined site must give to one path.
type confinedWant struct {
	status int
	has    []string // substrings the body must hold
	absent []string // substrings the body must not hold
	plain  bool     // no Content-Encoding, body exactly "inside page\n"
}

// confinedAnswer is the answer of the site mode-variant of
// TestConfinementEveryPath to the path of kind what to a link of kind.
func confinedAnswer(t *testing.T, mode, variant, kind, what string) confinedWant {
	refused := kind != "loop" || mode == "deny" // the mode refuses this link
	switch what {
	case "index":
		switch {
		case refused:
			return confinedWant{status: 403}
		case variant == "browse": // a loop under beneath: no index, a listing
			return confinedWant{status: 200, has: []string{"<html"}, absent: []string{"index.html"}}
		case variant == "pass":
			return confinedWant{status: 200, has: []string{"NEXT"}}
		}
		return confinedWant{status: 404}
	case "sidecar":
		return confinedWant{status: 200, plain: true}
	case "etag":
		if !refused {
			// A looping ETag file is an error, as file_server's
			// fs.ReadFile makes it.
			return confinedWant{status: 500}
		}
		return confinedWant{status: 200, has: []string{"inside page\n"}}
	case "listing":
		switch variant {
		case "browse":
			if mode == "deny" {
				return confinedWant{status: 200, has: []string{"plain.txt"}, absent: []string{"link-" + kind, "inner-link"}}
			}
			// beneath lists the link that stays inside.
			return confinedWant{status: 200, has: []string{"plain.txt", "inner-link"}, absent: []string{"link-" + kind}}
		case "pass":
			return confinedWant{status: 200, has: []string{"NEXT"}}
		}
		return confinedWant{status: 404}
	case "link":
		if !refused {
			return confinedWant{status: 400} // too many levels of links
		}
		return confinedWant{status: 403}
	}
	t.Fatalf("unknown path kind %q", what)
	return confinedWant{}
}

// check holds a response to w, and to confinement: no outside byte or
// outside name, in the body or in any header.
func (w confinedWant) check(t *testing.T, where string, status int, h http.Header, body []byte) {
	t.Helper()
	if status != w.status {
		t.Errorf("%s: status %d, want %d; body %q", where, status, w.status, body)
	}
	for _, leak := range []string{outsideBytes, outsideName} {
		if bytes.Contains(body, []byte(leak)) {
			t.Errorf("%s: the body holds %q: %q", where, leak, body)
		}
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, leak) {
					t.Errorf("%s: header %s holds %q: %q", where, k, leak, v)
				}
			}
		}
	}
	for _, s := range w.has {
		if !bytes.Contains(body, []byte(s)) {
			t.Errorf("%s: the body lacks %q: %q", where, s, body)
		}
	}
	for _, a := range w.absent {
		if bytes.Contains(body, []byte(a)) {
			t.Errorf("%s: the body shows %q, which the mode refuses", where, a)
		}
	}
	if w.plain && (h.Get("Content-Encoding") != "" || string(body) != "inside page\n") {
		t.Errorf("%s: Content-Encoding %q, body %q; want the file itself", where, h.Get("Content-Encoding"), body)
	}
}

// TestSitesSharingACacheKeepTheirConfinement serves the same files from
// four sites that share one cache, with nested roots and different
// symlinks modes, each asked at once on a cold cache and then again from
// its entries: every site gets its own answer, never one another site's
// lookup merged in flight or left in the cache.
func TestSitesSharingACacheKeepTheirConfinement(t *testing.T) {
	base := t.TempDir()
	outer := filepath.Join(base, "outer")
	inner := filepath.Join(outer, "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	for i := range rounds {
		// up-i leaves inner but stays in outer; in-i stays in inner.
		for p, s := range map[string]string{
			filepath.Join(outer, fmt.Sprintf("o%d.txt", i)): "outer file\n",
			filepath.Join(inner, fmt.Sprintf("i%d.txt", i)): "inner file\n",
		} {
			if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(fmt.Sprintf("../o%d.txt", i), filepath.Join(inner, fmt.Sprintf("up-%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fmt.Sprintf("i%d.txt", i), filepath.Join(inner, fmt.Sprintf("in-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	type siteCase struct {
		root, mode, prefix string // prefix: the request path of inner
		up, in             int    // the status of up-i and in-i
	}
	sites := []siteCase{
		{outer, "beneath", "/inner", 200, 200},
		{inner, "beneath", "", 403, 200},
		{outer, "deny", "/inner", 403, 403},
		{inner, "follow", "", 200, 200},
	}
	ports := make([]int, len(sites))
	var cfg bytes.Buffer
	for i, s := range sites {
		ports[i] = freePort(t)
		cfg.WriteString(siteBlock(ports[i], s.root, flashServe("symlinks "+s.mode)))
	}
	loadSites(t, "", cfg.String())
	shared := 0
	caches.Range(func(_, _ any) bool {
		shared++
		return true
	})
	if shared != 1 {
		t.Fatalf("%d caches for sites with the same cache settings, want 1 shared", shared)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(c.CloseIdleConnections)

	const perSite = 4
	checked := 0
	for i := range rounds {
		for _, phase := range []string{"cold", "cached"} {
			type result struct {
				where  string
				status int
				body   string
				want   int
				err    error
			}
			results := make(chan result, len(sites)*2*perSite)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for si, s := range sites {
				for _, link := range []string{"up", "in"} {
					want, body := s.up, "outer file\n"
					if link == "in" {
						want, body = s.in, "inner file\n"
					}
					url := fmt.Sprintf("http://127.0.0.1:%d%s/%s-%d", ports[si], s.prefix, link, i)
					for range perSite {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							r := result{where: fmt.Sprintf("%s (%s under %s, %s)", url, s.mode, s.root, phase), want: want}
							resp, err := c.Get(url)
							if err != nil {
								r.err = err
								results <- r
								return
							}
							var b bytes.Buffer
							_, r.err = b.ReadFrom(resp.Body)
							resp.Body.Close()
							r.status = resp.StatusCode
							if r.status == 200 && b.String() != body {
								r.err = fmt.Errorf("body %q, want %q", b.String(), body)
							}
							results <- r
						}()
					}
				}
			}
			close(start)
			wg.Wait()
			close(results)
			for r := range results {
				checked++
				if r.err != nil {
					t.Errorf("%s: %v", r.where, r.err)
				} else if r.status != r.want {
					t.Errorf("%s: status %d, want %d", r.where, r.status, r.want)
				}
			}
		}
	}
	t.Logf("%d responses checked", checked)
}

// TestSiteRootsCanonical checks the forms a root takes against the
// canonical path, and that a request pays no allocation for a root that is
// static, already canonical, or the same relative root as the last one.
func TestSiteRootsCanonical(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	static, err := newSiteRoots("docs/../site")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cwd, "site"); static.static != want {
		t.Errorf("static root docs/../site: %q, want %q", static.static, want)
	}
	sr, err := newSiteRoots("{http.vars.root}")
	if err != nil {
		t.Fatal(err)
	}
	if sr.static != "" {
		t.Errorf("a placeholder root resolved at provisioning: %q", sr.static)
	}
	abs := filepath.Join(cwd, "srv")
	for in, want := range map[string]string{
		"":                 cwd,
		".":                cwd,
		"docs":             filepath.Join(cwd, "docs"),
		"./docs/":          filepath.Join(cwd, "docs"),
		"a/../docs":        filepath.Join(cwd, "docs"),
		abs:                abs,
		abs + "/x/../":     abs,
		abs + "//y/./../.": abs,
	} {
		if got := sr.canonical(in); got != want {
			t.Errorf("root %q: %q, want %q", in, got, want)
		}
	}
	for _, root := range []string{abs, "docs", ""} {
		sr.canonical(root)
		if n := testing.AllocsPerRun(100, func() { sr.canonical(root) }); n != 0 {
			t.Errorf("root %q: %v allocations per request, want 0", root, n)
		}
	}
}
