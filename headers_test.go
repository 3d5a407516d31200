package flashserve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Cached values must be immutable to the rest of Caddy: no slice or
// buffer that outlives a response may be reachable from its header map or
// from what it hands a writer. These tests run flash_serve beside
// file_server in real Caddyfiles, with handlers in front that edit what
// they are given, and check that later responses, on the same site and
// on others sharing the cache, are unchanged.

func init() {
	caddy.RegisterModule(scribbler{})
	httpcaddyfile.RegisterHandlerDirective("headers_test_scribble", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		for h.Next() {
		}
		return scribbler{}, nil
	})
	httpcaddyfile.RegisterDirectiveOrder("headers_test_scribble", httpcaddyfile.Before, "header")
}

// scribbler is a test handler that behaves as badly as a writer may: it
// overwrites every byte it is given to write once it has passed them on,
// keeps them and overwrites them again after the response, and then
// overwrites every value of the response's header map in place.
type scribbler struct{}

func (scribbler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.headers_test_scribble", New: func() caddy.Module { return new(scribbler) }}
}

func (scribbler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	sw := &scribbleWriter{ResponseWriter: w}
	err := next.ServeHTTP(sw, r)
	for _, b := range sw.kept {
		for i := range b {
			b[i] = '#'
		}
	}
	for _, vs := range w.Header() {
		for i := range vs {
			vs[i] = "scribbled"
		}
	}
	return err
}

type scribbleWriter struct {
	http.ResponseWriter
	kept [][]byte
}

func (w *scribbleWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	for i := range p {
		p[i] = '!'
	}
	w.kept = append(w.kept, p)
	return n, err
}

// headerFixture writes the files of the header tests: a small file kept in
// memory, a page, a large file sent with sendfile, and a file with a gzip
// sidecar. It returns the root and the content of each by request path.
func headerFixture(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	root := t.TempDir()
	files := map[string][]byte{
		"/small.txt":   bytes.Repeat([]byte("small file kept in memory. "), 4),
		"/page.html":   []byte("<!doctype html><title>page</title><p>" + strings.Repeat("a paragraph. ", 100) + "</p>\n"),
		"/big.bin":     bytes.Repeat([]byte("0123456789abcdef"), 4097),
		"/comp.txt":    bytes.Repeat([]byte("compressible text. "), 200),
		"/comp.txt.gz": bytes.Repeat([]byte{0x1f, 0x8b, 8, 0}, 50),
		"/tpl.html":    []byte(`<p>{{.Req.URL.Path}} {{"templated"}}</p>` + "\n"),
	}
	mtime := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	for rel, content := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Minute)
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return root, files
}

// headerRules are Caddyfile lines that change the response headers file_server
// and flash_serve set: replace, set, add, delete and default, applied before
// the handler or deferred to the response (`>`, `defer`, and every delete).
var headerRules = []string{
	// Deferred replacements, which write into the slices they find.
	`header >Vary "Accept-Encoding" "Accept-Encoding, Origin"`,
	`header >Etag "-" "+"`,
	`header >Content-Type "text/" "text/x-"`,
	`header >Last-Modified "GMT" "+0000"`,
	`header >Content-Length "^" "0"`,
	`header >Accept-Ranges "bytes" "bytes, none"`,
	`header >Allow "GET" "GET, PUT"`,
	`header >* "a" "A"`,
	// A replacement before the handler: the headers are not there yet.
	`header Vary "Accept-Encoding" "Origin"`,
	// Set before the handler, which then keeps, replaces or adds to them.
	`header Etag "\"from-header\""`,
	`header Content-Type "text/x-set"`,
	`header Vary "Origin"`,
	`header Allow "OPTIONS"`,
	`header Accept-Ranges "none"`,
	// Set at the response.
	`header >Etag "\"deferred\""`,
	`header >Content-Type "text/x-deferred"`,
	`header >Vary "Origin"`,
	`header >Accept-Ranges "none"`,
	`header >Last-Modified "Thu, 01 Jan 2015 00:00:00 GMT"`,
	`header >X-Rule "on"`,
	// Added before the handler and at the response.
	`header +Vary "Origin"`,
	`header +Allow "OPTIONS"`,
	`header +Etag "\"added\""`,
	"header {\n\t\t+Vary \"Origin\"\n\t\tdefer\n\t}",
	"header {\n\t\t+Content-Type \"x/added\"\n\t\tdefer\n\t}",
	"header {\n\t\t+Etag \"\\\"added\\\"\"\n\t\t+Last-Modified \"added\"\n\t\t+Accept-Ranges \"added\"\n\t\tdefer\n\t}",
	// Deleted at the response.
	`header -Etag`,
	`header -Vary`,
	`header -Last-Modified`,
	`header -Content-Type`,
	`header -Accept-Ranges`,
	`header -Content-Length`,
	`header -Allow`,
	// A default: set at the response unless the handler set the field.
	`header ?Content-Type "x/default"`,
	`header ?Cache-Control "max-age=60"`,
}

// headerRequests are sent to every site: a memory hit, a 304, HEAD, one and
// several ranges, a sendfile body, a sidecar, 405, 404 and 416.
func headerRequests(etagOfSmall string) []parityRequest {
	h := func(kv ...string) http.Header {
		hd := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			hd.Set(kv[i], kv[i+1])
		}
		return hd
	}
	return []parityRequest{
		{method: "GET", target: "/small.txt", header: h()},
		{method: "GET", target: "/small.txt", header: h("If-None-Match", etagOfSmall)},
		{method: "HEAD", target: "/page.html", header: h()},
		{method: "GET", target: "/page.html", header: h("Range", "bytes=0-9")},
		{method: "GET", target: "/big.bin", header: h()},
		{method: "GET", target: "/big.bin", header: h("Range", "bytes=100-199,300-399")},
		{method: "GET", target: "/comp.txt", header: h("Accept-Encoding", "gzip")},
		{method: "POST", target: "/small.txt", header: h()},
		{method: "GET", target: "/missing.txt", header: h()},
		{method: "GET", target: "/small.txt", header: h("Range", "bytes=999999-")},
	}
}

// headerRequestStatus is the status file_server gives each of
// headerRequests, by the request's String, whatever the header rule.
var headerRequestStatus = map[string]int{
	"GET /small.txt":                              http.StatusOK,
	"HEAD /page.html":                             http.StatusOK,
	"GET /page.html [Range: bytes=0-9]":           http.StatusPartialContent,
	"GET /big.bin":                                http.StatusOK,
	"GET /big.bin [Range: bytes=100-199,300-399]": http.StatusPartialContent,
	"GET /comp.txt [Accept-Encoding: gzip]":       http.StatusOK,
	"POST /small.txt":                             http.StatusMethodNotAllowed,
	"GET /missing.txt":                            http.StatusNotFound,
	"GET /small.txt [Range: bytes=999999-]":       http.StatusRequestedRangeNotSatisfiable,
}

// allHeaderDifferences compares two responses as differences does, but
// over every header but Date, and the transfer encoding.
func allHeaderDifferences(fs, fl parityResponse) []string {
	diffs := differences(bodyBoundaryNormalised(fs), bodyBoundaryNormalised(fl))
	if fs.err != nil || fl.err != nil {
		return diffs
	}
	nfs, nfl := bodyBoundaryNormalised(fs), bodyBoundaryNormalised(fl)
	var keys []string
	for k := range nfs.header {
		keys = append(keys, k)
	}
	for k := range nfl.header {
		if _, ok := nfs.header[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(fs.transfer, fl.transfer) {
		diffs = append(diffs, fmt.Sprintf("Transfer-Encoding: file_server %q, flash_serve %q", fs.transfer, fl.transfer))
	}
	for _, k := range keys {
		if k == "Date" || slices.Contains(parityHeaders, k) {
			continue // Date differs; differences compared the others
		}
		a, b := strings.Join(nfs.header.Values(k), ", "), strings.Join(nfl.header.Values(k), ", ")
		if a != b {
			diffs = append(diffs, fmt.Sprintf("%s: file_server %q, flash_serve %q", k, a, b))
		}
	}
	return diffs
}

var anyBoundaryRE = regexp.MustCompile(`(?i)boundary=[0-9a-z'()+_,\-./:=?]+`)

// bodyBoundaryNormalised replaces a multipart body's random boundary by a
// fixed word, in the body and wherever the Content-Type still shows it: a
// header rule may have rewritten or removed that Content-Type, so the
// boundary is taken from the body's first line.
func bodyBoundaryNormalised(r parityResponse) parityResponse {
	first, _, ok := bytes.Cut(r.body, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(first, []byte("--")) || len(first) < 20 {
		return r.normalised()
	}
	r.body = bytes.ReplaceAll(r.body, first[2:], []byte("BOUNDARY"))
	r.header = r.header.Clone()
	for i, v := range r.header["Content-Type"] {
		r.header["Content-Type"][i] = anyBoundaryRE.ReplaceAllString(v, "boundary=BOUNDARY")
	}
	return r
}

// chunkedWhereFlashServeCounted reports whether file_server's response is
// chunked where flash_serve's declares exactly the length it sends.
func chunkedWhereFlashServeCounted(fs, fl parityResponse) bool {
	return fs.header.Get("Content-Length") == "" && slices.Equal(fs.transfer, []string{"chunked"}) &&
		fl.header.Get("Content-Length") == fmt.Sprint(len(fl.body)) && len(fl.transfer) == 0
}

// headerSites returns the site blocks of one file_server and one
// flash_serve site named after name on port, with the given lines before
// the handler.
func headerSites(port int, root, name, lines string) string {
	var b strings.Builder
	for _, handler := range []string{"file_server", "flash_serve"} {
		b.WriteString(siteAt(fmt.Sprintf("http://%s-%s.test:%d", handler, name, port), root, lines, block(handler, "precompressed gzip")))
	}
	return b.String()
}

// compareSites sends reqs to the file_server and flash_serve sites named
// name and reports every difference that is not intended.
func compareSites(t *testing.T, c *http.Client, port int, name, round string, reqs []parityRequest) {
	t.Helper()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, pr := range reqs {
		fs := do(c, base, fmt.Sprintf("file_server-%s.test:%d", name, port), pr)
		fl := do(c, base, fmt.Sprintf("flash_serve-%s.test:%d", name, port), pr)
		if fs.err != nil || fl.err != nil {
			t.Errorf("%s, %s, %s: file_server %v, flash_serve %v", round, name, pr, fs.err, fl.err)
			continue
		}
		if want := headerRequestStatus[pr.String()]; want != 0 && fs.status != want {
			// A site that did not match would answer 200 on both sides.
			t.Errorf("%s, %s, %s: file_server answered %d, want %d", round, name, pr, fs.status, want)
		}
		diffs := allHeaderDifferences(fs, fl)
		if len(diffs) == 0 {
			continue
		}
		if _, ok := intendedReason(pr, fs, fl); ok {
			continue
		}
		if chunkedWhereFlashServeCounted(fs, fl) && !slices.ContainsFunc(diffs, func(d string) bool {
			return !strings.HasPrefix(d, "Content-Length:") && !strings.HasPrefix(d, "Transfer-Encoding:")
		}) {
			// With Content-Length deleted by a rule, net/http counts a
			// body it holds whole itself, and chunks one that went through
			// ReadFrom: file_server's multipart bodies do, flash_serve's
			// small parts are written. Where the bytes leave is not state
			// kept between requests; both bodies were compared above.
			continue
		}
		t.Errorf("%s, site %s, %s:\n\t%s", round, name, pr, strings.Join(diffs, "\n\t"))
	}
}

// TestHeaderRulesLeaveOtherResponsesAlone runs every header rule on a site
// of its own, beside a site without rules; all flash_serve sites share one
// cache. Three rounds of the same requests must answer as file_server
// does, on the site with the rule and on the plain one, every time: a rule
// that wrote into a value shared between requests would show on the
// second round or on the plain site.
func TestHeaderRulesLeaveOtherResponsesAlone(t *testing.T) {
	root, _ := headerFixture(t)
	port := freePort(t)
	var sites strings.Builder
	sites.WriteString(headerSites(port, root, "plain", ""))
	for i, rule := range headerRules {
		sites.WriteString(headerSites(port, root, fmt.Sprint("rule", i), rule))
	}
	loadSites(t, "", sites.String())
	c := newClients(t).h1

	first := do(c, fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("file_server-plain.test:%d", port),
		parityRequest{method: "GET", target: "/small.txt"})
	if first.err != nil || first.status != http.StatusOK || first.header.Get("Etag") == "" {
		t.Fatalf("file_server without rules: %d %v, ETag %q", first.status, first.err, first.header.Get("Etag"))
	}
	reqs := headerRequests(first.header.Get("Etag"))
	for round := 1; round <= 3; round++ {
		for i, rule := range headerRules {
			r := fmt.Sprintf("round %d, after %q", round, rule)
			compareSites(t, c, port, fmt.Sprint("rule", i), r, reqs)
			compareSites(t, c, port, "plain", r, reqs)
		}
		if t.Failed() {
			t.Fatalf("round %d differs", round)
		}
	}
	t.Logf("%d rules × %d requests × 3 rounds, each also on the plain site, matched file_server", len(headerRules), len(reqs))
}

// TestResponseHeadersAreTheResponses puts a handler in front of
// flash_serve that, after each response, overwrites every value of the
// header map in place and every byte it was given to write. The next
// response, on that site and on a plain one sharing the cache, must be
// what file_server sends.
func TestResponseHeadersAreTheResponses(t *testing.T) {
	root, files := headerFixture(t)
	port := freePort(t)
	loadSites(t, "", headerSites(port, root, "plain", "")+
		headerSites(port, root, "scribbled", "headers_test_scribble")+
		headerSites(port, root, "vary", "header Vary \"Origin\"\n\theaders_test_scribble"))
	c := newClients(t).h1
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	first := do(c, base, fmt.Sprintf("file_server-plain.test:%d", port), parityRequest{method: "GET", target: "/small.txt"})
	if first.err != nil || first.status != http.StatusOK {
		t.Fatalf("file_server: %d %v", first.status, first.err)
	}
	reqs := headerRequests(first.header.Get("Etag"))
	for round := 1; round <= 3; round++ {
		for _, site := range []string{"scribbled", "vary"} {
			// The scribbled responses themselves are not compared: their
			// bodies are whatever the writer below got before the scribble.
			for _, pr := range reqs {
				if r := do(c, base, fmt.Sprintf("flash_serve-%s.test:%d", site, port), pr); r.err != nil {
					t.Fatalf("%s %s: %v", site, pr, r.err)
				}
			}
			r := fmt.Sprintf("round %d, after the %s site", round, site)
			compareSites(t, c, port, "plain", r, reqs)
			// Bodies checked on their own too, against the files.
			for _, p := range []string{"/small.txt", "/page.html", "/big.bin"} {
				got := do(c, base, fmt.Sprintf("flash_serve-plain.test:%d", port), parityRequest{method: "GET", target: p})
				if !bytes.Equal(got.body, files[p]) {
					t.Errorf("%s: %s is not the file's content (%d bytes, starts %q)", r, p, len(got.body), got.body[:min(len(got.body), 20)])
				}
			}
		}
		if t.Failed() {
			t.Fatalf("round %d differs", round)
		}
	}
}

// TestWritersLeaveCachedBodiesAlone serves a memory-cached file through
// templates and through encode, whose writers buffer and rewrite what
// they are given, then the same file from a plain site sharing the cache.
func TestWritersLeaveCachedBodiesAlone(t *testing.T) {
	root, files := headerFixture(t)
	port := freePort(t)
	loadSites(t, "", headerSites(port, root, "plain", "")+
		headerSites(port, root, "templates", "templates")+
		headerSites(port, root, "encode", "encode gzip {\n\t\tminimum_length 1\n\t}")+
		headerSites(port, root, "both", "encode gzip {\n\t\tminimum_length 1\n\t}\n\ttemplates")+
		headerSites(port, root, "scribbled", "headers_test_scribble\n\ttemplates"))
	c := newClients(t).h1
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	want := "<p>/tpl.html templated</p>\n"
	for round := 1; round <= 3; round++ {
		for _, site := range []string{"templates", "both", "scribbled"} {
			pr := parityRequest{method: "GET", target: "/tpl.html", header: http.Header{"Accept-Encoding": {"gzip"}}}
			got := do(c, base, fmt.Sprintf("flash_serve-%s.test:%d", site, port), pr)
			if got.err != nil || got.status != http.StatusOK {
				t.Fatalf("round %d, %s: %d %v", round, site, got.status, got.err)
			}
			if site == "templates" {
				if string(got.body) != want {
					t.Errorf("round %d: templates gave %q, want %q", round, got.body, want)
				}
			}
			compareSites(t, c, port, "plain", fmt.Sprintf("round %d, after %s", round, site),
				[]parityRequest{{method: "GET", target: "/tpl.html", header: http.Header{}}, {method: "GET", target: "/small.txt", header: http.Header{}}})
		}
		for _, p := range []string{"/tpl.html", "/small.txt"} {
			pr := parityRequest{method: "GET", target: p, header: http.Header{"Accept-Encoding": {"gzip"}}}
			if got := do(c, base, fmt.Sprintf("flash_serve-encode.test:%d", port), pr); got.err != nil || got.header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("round %d, encode %s: %v, Content-Encoding %q", round, p, got.err, got.header.Get("Content-Encoding"))
			}
			got := do(c, base, fmt.Sprintf("flash_serve-plain.test:%d", port), parityRequest{method: "GET", target: p, header: http.Header{}})
			if !bytes.Equal(got.body, files[p]) {
				t.Errorf("round %d: after encode, %s is %q, want the file", round, p, got.body)
			}
		}
		if t.Failed() {
			t.Fatalf("round %d differs", round)
		}
	}
}
