package flashserve

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

// The composition suite runs flash_serve and file_server inside the
// Caddyfiles users write: each case is two sites (a first and a second,
// whose flash_serve handlers share one cache, as every handler with the
// same cache settings does), each written once with file_server and once
// with flash_serve, over HTTP/1.1 (through the flash_serve listener
// wrapper, so bodies leave with sendfile) and HTTP/2 (over TLS with
// `tls internal`). Every case's requests go three rounds, so that state
// one response leaves behind shows in a later one or on the other site.
// Status, every header but Date, and the body must be file_server's,
// except the README's intended differences.

// compSite is one site of a case. lines is the site's body, in which
// {serve} stands for the handler directive with its options; {root},
// {root2} and {nested} for the fixture's trees.
type compSite struct {
	prefix    string // prepended to the default requests' paths
	lines     []string
	opts      string // handler options both take
	flashOpts string // handler options only flash_serve has
}

// compReq is one request of a case. {p} in the target is the site's
// prefix; {etag} and {lastmod} in a header value are the validators
// file_server sent for the site's big.txt in this round. An empty header
// value removes a header the case adds to every request.
type compReq struct {
	method, target string
	header         map[string]string
	variants       []int // the sites (0, 1) it is sent to; nil: both
	// flash, when set, judges flash_serve's answer on its own instead of
	// comparing it with file_server's: for what file_server cannot do
	// (the symlinks modes).
	flash func(r parityResponse) error
	// validators marks the request whose file_server answer gives {etag}
	// and {lastmod}.
	validators bool
}

type compCase struct {
	name   string
	sites  [2]compSite
	header map[string]string // added to every request
	extra  []compReq
	// routes, when set, replaces the JSON routes of the case's servers,
	// for what a Caddyfile cannot say; handler is the handler's JSON, and
	// match the route's matcher (the TLS sites' host, which tells Caddy's
	// automatic HTTPS to serve the server with TLS).
	routes func(handler, match string) string
	// before runs once, before the first round.
	before func(t *testing.T, cr *compRun)
}

// compTree is one tree of the fixture: the same names with other bytes.
func writeCompTree(t *testing.T, dir string, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	text := func(n int) []byte {
		words := []string{"flash ", "serve ", "caddy ", "file ", "server ", "zero ", "copy ", "\n"}
		var b []byte
		for len(b) < n {
			b = append(b, words[rng.IntN(len(words))]...)
		}
		return b[:n]
	}
	mtime := time.Date(2025, 6, 7, 8, 9, 10, int(seed)*1000, time.UTC)
	write := func(rel string, content []byte) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Second)
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("small.txt", text(1000))  // kept in memory
	write("mid.txt", text(20_000))  // above memory_cache's max_file
	write("big.txt", text(100_000)) // sent with sendfile on HTTP/1.1
	write("dir/index.html", []byte(fmt.Sprintf("<p>index of %d</p>\n", seed)))
	write("list/a.txt", text(10))
	write("list/b.html", text(20))
	comp := text(3000)
	write("comp.txt", comp)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(comp)
	zw.Close()
	write("comp.txt.gz", gz.Bytes())
	write("tpl.html", []byte(fmt.Sprintf("<p>{{\"templated\"}} {{.Req.URL.Path}} {{len \"%d\"}}</p>\n%s", seed, text(700))))
	write("err/404.html", []byte("<p>custom 404 page</p>\n"))
	write("err/405.html", []byte("<p>custom 405 page</p>\n"))
}

const compSecret = "TOP SECRET, outside every root"

// buildCompFixture makes base/site, base/site2 (the same names, other
// bytes), base/site/nested (a third tree inside the first) and
// base/outside, with links in base/site that the symlinks modes judge.
func buildCompFixture(t *testing.T) (base string) {
	base = t.TempDir()
	site := filepath.Join(base, "site")
	writeCompTree(t, site, 1)
	writeCompTree(t, filepath.Join(base, "site2"), 2)
	writeCompTree(t, filepath.Join(site, "nested"), 3)
	if err := os.MkdirAll(filepath.Join(base, "outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "outside", "secret.txt")
	if err := os.WriteFile(secret, []byte(compSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"linked", "linkdir"} {
		if err := os.MkdirAll(filepath.Join(site, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(site, "linked", "regular.txt"), []byte("regular\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"linked/abs.txt":     secret,                     // absolute, outside
		"linked/rel.txt":     "../../outside/secret.txt", // relative, leaves the root
		"linked/in.txt":      "../small.txt",             // relative, stays inside
		"linked/loop":        "loop",                     // a loop
		"linkdir/index.html": "../../outside/secret.txt", // an index file leaving the root
		"nested/up.txt":      "../small.txt",             // inside site, outside site/nested
	} {
		if err := os.Symlink(target, filepath.Join(site, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// defaultCompRequests are sent to every site of every case.
var defaultCompRequests = []compReq{
	{method: "GET", target: "{p}/small.txt"},
	{method: "GET", target: "{p}/big.txt", validators: true},
	{method: "GET", target: "{p}/mid.txt"},
	{method: "HEAD", target: "{p}/big.txt"},
	{method: "GET", target: "{p}/big.txt", header: map[string]string{"Range": "bytes=100-199"}},
	{method: "GET", target: "{p}/big.txt", header: map[string]string{"Range": "bytes=0-9,5000-5009"}},
	{method: "GET", target: "{p}/big.txt", header: map[string]string{"If-None-Match": "{etag}"}},
	{method: "GET", target: "{p}/big.txt", header: map[string]string{"If-Modified-Since": "{lastmod}"}},
	{method: "GET", target: "{p}/dir"},
	{method: "GET", target: "{p}/missing.txt"},
	{method: "GET", target: "{p}/dir/"},
	{method: "GET", target: "{p}/comp.txt", header: map[string]string{"Accept-Encoding": "gzip"}},
	{method: "OPTIONS", target: "{p}/small.txt"},
	{method: "POST", target: "{p}/small.txt"},
}

// plainSite is a site with a root and the handler, and the lines given
// before the handler.
func plainSite(before ...string) compSite {
	return compSite{lines: append(append([]string{"root * {root}"}, before...), "{serve}"), opts: "precompressed gzip"}
}

// refused is what flash_serve must answer for a path its symlinks mode
// refuses: 403, and no byte from outside the root.
func refused(r parityResponse) error {
	if r.status != http.StatusForbidden {
		return fmt.Errorf("status %d, want 403", r.status)
	}
	return noSecret(r)
}

func noSecret(r parityResponse) error {
	if bytes.Contains(r.body, []byte(compSecret)) {
		return fmt.Errorf("the body holds the file outside the root")
	}
	return nil
}

// listingWithout checks a listing that must leave out the named links.
func listingWithout(names ...string) func(parityResponse) error {
	return func(r parityResponse) error {
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("regular.txt")) {
			return fmt.Errorf("status %d, want 200 with a listing naming regular.txt", r.status)
		}
		for _, n := range names {
			if bytes.Contains(r.body, []byte(n)) {
				return fmt.Errorf("the listing names %s, a link the mode refuses", n)
			}
		}
		return noSecret(r)
	}
}

func browseCase(mode string) compCase {
	s := plainSite()
	s.opts = "browse\nprecompressed gzip"
	s.flashOpts = "symlinks " + mode
	c := compCase{name: "browse symlinks " + mode, sites: [2]compSite{s, s}, extra: []compReq{
		{method: "GET", target: "{p}/list/"},
		{method: "GET", target: "{p}/list"},
		{method: "HEAD", target: "{p}/list/"},
	}}
	// What each mode must do with each link; nil: as file_server.
	judge := map[string][5]func(parityResponse) error{
		//           /linked/      rel.txt  abs.txt  in.txt   /linkdir/
		"follow":  {nil, nil, nil, nil, nil},
		"beneath": {listingWithout("abs.txt", "rel.txt"), refused, refused, nil, refused},
		"deny":    {listingWithout("abs.txt", "rel.txt", "in.txt"), refused, refused, refused, refused},
	}[mode]
	for i, target := range []string{"{p}/linked/", "{p}/linked/rel.txt", "{p}/linked/abs.txt", "{p}/linked/in.txt", "{p}/linkdir/"} {
		c.extra = append(c.extra, compReq{method: "GET", target: target, flash: judge[i]})
	}
	loop := compReq{method: "GET", target: "{p}/linked/loop"}
	if mode != "follow" {
		loop.flash = func(r parityResponse) error {
			if r.status < 400 || r.status > 499 {
				return fmt.Errorf("status %d for a looping link, want a 4xx", r.status)
			}
			return nil
		}
	}
	c.extra = append(c.extra, loop)
	return c
}

const compPassword = "open sesame"

// compPasswordHash is bcrypt of compPassword at cost 4, so that checking
// it costs little under the race detector.
const compPasswordHash = "$2a$04$691QLmMea29wTMk5VnS29OIozxqabdoW/YcF1UAsG8KM2Mv99ddu6"

func compCases() []compCase {
	ae := func(enc string) map[string]string { return map[string]string{"Accept-Encoding": enc} }
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+compPassword))
	noRoot := compSite{prefix: "/site", lines: []string{"{serve}"}, opts: "precompressed gzip"}
	noRootBeneath := noRoot
	noRootBeneath.flashOpts = "symlinks beneath"
	nestedOuter, nestedInner := plainSite(), plainSite()
	nestedOuter.prefix = "/nested"
	nestedInner.lines[0] = "root * {nested}"
	nestedOuter.flashOpts, nestedInner.flashOpts = "symlinks beneath", "symlinks beneath"
	secondRoot := plainSite()
	secondRoot.lines[0] = "root * {root2}"
	relRoot, relRootDots := plainSite(), plainSite()
	relRoot.lines[0] = "root * site"
	relRootDots.lines[0] = "root * ./site2/../site"
	pair := func(s compSite) [2]compSite { return [2]compSite{s, s} }
	withPrefix := func(s compSite, p string) compSite { s.prefix = p; return s }
	return []compCase{
		{name: "header set", sites: pair(plainSite(
			`header X-Set "one"`, `header Cache-Control "public, max-age=60"`))},
		{name: "header add", sites: pair(plainSite(
			`header +Vary "Origin"`, `header +X-Add "a"`, `header +Allow "PUT"`, `header +Link "</x.css>; rel=preload"`))},
		{name: "header delete", sites: pair(plainSite(
			`header -Server`, `header -Accept-Ranges`, `header -Last-Modified`))},
		{name: "header replace", sites: pair(plainSite(
			`header >Vary "Accept-Encoding" "Accept-Encoding, Origin"`,
			`header >Content-Type "text/plain" "text/x-plain"`,
			`header >Last-Modified "GMT" "GMT+0"`,
			`header >Accept-Ranges "bytes" "bytes, none"`,
			`header >Etag "-" "+"`,
			`header >Allow "GET" "GET, PUT"`))},
		{name: "header deferred", sites: pair(plainSite(
			`header >X-Deferred "d"`, `header >Cache-Control "no-store"`, `header >Content-Type "application/x-deferred"`))},
		{name: "encode gzip zstd", sites: pair(plainSite("encode gzip zstd")), extra: []compReq{
			{method: "GET", target: "{p}/small.txt", header: ae("zstd")},
			{method: "GET", target: "{p}/small.txt", header: ae("gzip")},
			{method: "GET", target: "{p}/mid.txt", header: ae("zstd")},
			{method: "GET", target: "{p}/mid.txt", header: ae("gzip, zstd")},
			{method: "HEAD", target: "{p}/mid.txt", header: ae("zstd")},
			{method: "GET", target: "{p}/big.txt", header: ae("zstd")},
			{method: "GET", target: "{p}/big.txt", header: map[string]string{"Accept-Encoding": "zstd", "Range": "bytes=10-20"}},
			{method: "GET", target: "{p}/comp.txt", header: ae("zstd")},
			{method: "GET", target: "{p}/dir/", header: ae("zstd")},
		}},
		{name: "handle_path", sites: pair(compSite{prefix: "/static", lines: []string{
			"handle_path /static/* {\n\troot * {root}\n\t{serve}\n}"}, opts: "precompressed gzip"}),
			extra: []compReq{{method: "GET", target: "/small.txt"}, {method: "GET", target: "/static"}}},
		{name: "uri strip_prefix", sites: pair(withPrefix(plainSite("uri strip_prefix /pre"), "/pre"))},
		{name: "rewrite", sites: pair(plainSite(`rewrite /alias.txt /small.txt`, `rewrite /alias-dir /dir/`)),
			extra: []compReq{{method: "GET", target: "/alias.txt"}, {method: "HEAD", target: "/alias.txt"}, {method: "GET", target: "/alias-dir"}}},
		{name: "try_files", sites: pair(plainSite(`try_files {path} {path}.txt /dir/index.html`)),
			extra: []compReq{{method: "GET", target: "/small"}, {method: "GET", target: "/nothing/here"}}},
		{name: "file matcher", sites: pair(compSite{lines: []string{
			"root * {root}",
			"@file file {\n\ttry_files {path} {path}.txt {path}/index.html\n}",
			"handle @file {\n\trewrite {http.matchers.file.relative}\n\t{serve}\n}",
			"handle {\n\trespond \"no such file\" 404\n}"}, opts: "precompressed gzip"}),
			extra: []compReq{{method: "GET", target: "/small"}, {method: "GET", target: "/nothing"}}},
		{name: "basic_auth", sites: pair(plainSite("basic_auth {\n\talice " + compPasswordHash + "\n}")),
			header: map[string]string{"Authorization": auth},
			extra: []compReq{
				{method: "GET", target: "/small.txt", header: map[string]string{"Authorization": ""}},
				{method: "GET", target: "/big.txt", header: map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:wrong"))}},
			}},
		{name: "handle_errors", sites: pair(plainSite("handle_errors {\n\trewrite * /err/{err.status_code}.html\n\t{serve}\n}"))},
		{name: "subroute with error routes", sites: pair(plainSite()), routes: func(handler, match string) string {
			return `[{` + match + `"handle": [{"handler": "subroute",
				"routes": [{"handle": [{"handler": "vars", "root": "{root}"}, ` + handler + `]}],
				"errors": {"routes": [{"handle": [
					{"handler": "headers", "response": {"set": {"X-Error": ["{http.error.status_code}"]}}},
					{"handler": "static_response", "status_code": "{http.error.status_code}", "body": "subroute caught {http.error.status_code}\n"}]}]}}]}]`
		}},
		{name: "templates", sites: pair(plainSite("templates")), extra: []compReq{
			{method: "GET", target: "/tpl.html"}, {method: "HEAD", target: "/tpl.html"},
			{method: "GET", target: "/tpl.html", header: map[string]string{"If-None-Match": "*"}},
		}},
		{name: "request_header", sites: pair(plainSite(`request_header -Range`, `request_header +Accept-Encoding gzip`))},
		{name: "two roots, one cache", sites: [2]compSite{plainSite(), secondRoot}},
		{name: "nested roots beneath", sites: [2]compSite{nestedOuter, nestedInner},
			extra:  []compReq{{method: "GET", target: "{p}/up.txt", variants: []int{0}}, {method: "GET", target: "{p}/up.txt", variants: []int{1}, flash: refused}},
			before: nestedFirstLookups},
		{name: "no root", sites: [2]compSite{noRoot, noRootBeneath}},
		{name: "relative root", sites: [2]compSite{relRoot, relRootDots}},
		browseCase("follow"),
		browseCase("beneath"),
		browseCase("deny"),
	}
}

// nestedFirstLookups sends the first lookups of up.txt, a link that stays
// inside the outer root but leaves the inner one, to both sites at once:
// concurrent misses that merged across roots would give one site the
// other's answer.
func nestedFirstLookups(t *testing.T, cr *compRun) {
	const each = 64
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for range each {
		for v, want := range []int{http.StatusOK, http.StatusForbidden} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := cr.sites[v][kindFlash][protoH1]
				r := do(cr.clients.h1, s.base, s.host, parityRequest{method: "GET", target: cr.c.sites[v].prefix + "/up.txt", header: http.Header{}})
				switch {
				case r.err != nil:
					errs <- r.err
				case r.status != want:
					errs <- fmt.Errorf("site %d: up.txt answered %d, want %d", v, r.status, want)
				case noSecret(r) != nil:
					errs <- noSecret(r)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

const (
	kindFileServer = iota
	kindFlash
)

const (
	protoH1 = iota
	protoH2
)

// compAddr is one site as the client reaches it.
type compAddr struct {
	base, host string // the URL to dial, and the Host to send (for TLS)
	port       int
}

// compRun is a case with its sites: [site][kind][proto].
type compRun struct {
	c       compCase
	sites   [2][2][2]compAddr
	clients clients
}

// handlerDirective is the handler with its options, as a Caddyfile line
// and as JSON.
func handlerDirective(kind int, s compSite) (caddyfileText, jsonText string) {
	name := [2]string{"file_server", "flash_serve"}[kind]
	opts := strings.TrimSpace(s.opts)
	if kind == kindFlash && s.flashOpts != "" {
		opts += "\n" + s.flashOpts
	}
	caddyfileText = name
	if opts != "" {
		caddyfileText += " {\n\t" + strings.ReplaceAll(opts, "\n", "\n\t") + "\n}"
	}
	// The JSON cases use the plain handler with gzip sidecars.
	jsonText = `{"handler": "` + name + `", "precompressed": {"gzip": {}}, "precompressed_order": ["gzip"]}`
	return caddyfileText, jsonText
}

// loadComposition writes every case's sites into one Caddyfile, adapts
// it, replaces the routes the cases give in JSON, and loads it.
func loadComposition(t *testing.T, base string, cases []compCase, cl clients) []*compRun {
	roots := []string{"{root}", filepath.Join(base, "site"), "{root2}", filepath.Join(base, "site2"),
		"{nested}", filepath.Join(base, "site", "nested")}
	var sites strings.Builder
	jsonRoutes := map[string]string{} // listen address → routes
	var runs []*compRun
	newPort := portPicker(t)
	for _, c := range cases {
		cr := &compRun{c: c, clients: cl}
		for v, s := range c.sites {
			for kind := range 2 {
				directive, handlerJSON := handlerDirective(kind, s)
				r := strings.NewReplacer(append([]string{"{serve}", directive}, roots...)...)
				for proto := range 2 {
					port := newPort()
					a := compAddr{base: fmt.Sprintf("http://127.0.0.1:%d", port), port: port}
					addr := a.base
					if proto == protoH2 {
						addr = fmt.Sprintf("https://localhost:%d", port)
						a.base, a.host = fmt.Sprintf("https://127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)
					}
					cr.sites[v][kind][proto] = a
					lines := make([]string, len(s.lines))
					for i, l := range s.lines {
						lines[i] = r.Replace(l)
					}
					sites.WriteString(siteAt(addr, "", lines...))
					if c.routes != nil {
						match := ""
						if proto == protoH2 {
							match = `"match": [{"host": ["localhost"]}], `
						}
						jsonRoutes[fmt.Sprintf("127.0.0.1:%d", port)] = r.Replace(c.routes(handlerJSON, match))
					}
				}
			}
		}
		runs = append(runs, cr)
	}
	g := caddyGlobals{options: []string{"skip_install_trust", "local_certs", "auto_https disable_redirects"}, protocols: "h1 h2"}
	cfgJSON := adaptCaddyfile(t, g.text(t)+sites.String())
	if len(jsonRoutes) > 0 {
		cfgJSON = replaceRoutes(t, cfgJSON, jsonRoutes)
	}
	start := time.Now()
	loadConfig(t, cfgJSON)
	t.Logf("%d sites loaded in %v", len(runs)*8, time.Since(start).Round(time.Millisecond))
	return runs
}

// portPicker returns a function that gives ports free on 127.0.0.1, each
// once, below the kernel's ephemeral range where it has one: a port
// probed free there cannot be taken by an outgoing connection (of this
// or another test process) before Caddy binds it, as one in the
// ephemeral range can, and the suite binds many.
func portPicker(t *testing.T) func() int {
	low, high := 0, 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first int
		if _, err := fmt.Sscan(string(b), &first); err == nil && first > 20000 {
			low, high = 10000, first
		}
	}
	used := map[int]bool{}
	return func() int {
		for range 1000 {
			p := 0
			if low == 0 {
				p = freePort(t)
			} else if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", low+rand.IntN(high-low))); err == nil {
				p = l.Addr().(*net.TCPAddr).Port
				l.Close()
			}
			// A probe closes what it bound, so it can find a port twice.
			if p != 0 && !used[p] {
				used[p] = true
				return p
			}
		}
		t.Fatal("no free port")
		return 0
	}
}

// replaceRoutes sets the routes of the servers that listen on the given
// addresses.
func replaceRoutes(t *testing.T, cfgJSON []byte, routes map[string]string) []byte {
	var whole, apps, httpApp map[string]json.RawMessage
	var servers map[string]map[string]json.RawMessage
	for _, err := range []error{
		json.Unmarshal(cfgJSON, &whole),
		json.Unmarshal(whole["apps"], &apps),
		json.Unmarshal(apps["http"], &httpApp),
		json.Unmarshal(httpApp["servers"], &servers),
	} {
		if err != nil {
			t.Fatalf("reading the adapted config: %v", err)
		}
	}
	replaced := 0
	for _, srv := range servers {
		var listen []string
		json.Unmarshal(srv["listen"], &listen)
		for _, l := range listen {
			if r, ok := routes[l]; ok {
				if !json.Valid([]byte(r)) {
					t.Fatalf("routes for %s are not JSON: %s", l, r)
				}
				srv["routes"] = json.RawMessage(r)
				replaced++
			}
		}
	}
	if replaced != len(routes) {
		t.Fatalf("replaced the routes of %d servers, want %d", replaced, len(routes))
	}
	remarshal := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	httpApp["servers"] = remarshal(servers)
	apps["http"] = remarshal(httpApp)
	whole["apps"] = remarshal(apps)
	return remarshal(whole)
}

// build makes the request for one site: its prefix, the case's headers,
// the validators.
func (rq compReq) build(c compCase, prefix string, vals [2]string) parityRequest {
	pr := parityRequest{method: rq.method, target: strings.ReplaceAll(rq.target, "{p}", prefix), header: http.Header{}}
	vr := strings.NewReplacer("{etag}", vals[0], "{lastmod}", vals[1])
	for _, h := range []map[string]string{c.header, rq.header} {
		for k, v := range h {
			if v == "" {
				pr.header.Del(k)
			} else {
				pr.header.Set(k, vr.Replace(v))
			}
		}
	}
	return pr
}

func TestComposition(t *testing.T) {
	skipIfShort(t, "the composition suite over HTTP/1.1 and HTTP/2")
	start := time.Now()
	base := buildCompFixture(t)
	// The sites without a root serve the working directory, and the
	// relative roots are resolved against it.
	t.Chdir(base)
	cl := newClients(t)
	cases := compCases()
	runs := loadComposition(t, base, cases, cl)

	// The internal CA issues the certificate in the background; every TLS
	// site serves the same name.
	first := runs[0].sites[0][kindFlash][protoH2]
	eventually(t, 30*time.Second, func() error {
		if r := do(cl.h2, first.base, first.host, parityRequest{method: "HEAD", target: "/", header: http.Header{}}); r.err != nil {
			return fmt.Errorf("TLS not ready: %w", r.err)
		}
		return nil
	})
	// On Linux, large bodies on cleartext HTTP/1.1 leave with sendfile;
	// without the Linux engines, they are copied.
	var bigEngine transmit.Engine
	for e := range transmit.NumEngines {
		if e.String() == bigFileEngine {
			bigEngine = e
		}
	}
	bigBefore := counters.bytes[bigEngine].Load()

	for _, cr := range runs {
		t.Run(cr.c.name, func(t *testing.T) { cr.run(t) })
	}
	if got := counters.bytes[bigEngine].Load() - bigBefore; got < 100_000 {
		t.Errorf("flash_serve sent %d bytes with %s, want at least one big.txt (100000)", got, bigFileEngine)
	}
	t.Logf("%d cases in %v", len(runs), time.Since(start).Round(time.Millisecond))
}

func (cr *compRun) run(t *testing.T) {
	if cr.c.before != nil {
		cr.c.before(t, cr)
	}
	reqs := append(slices.Clone(defaultCompRequests), cr.c.extra...)
	protoNames := [2]string{"HTTP/1.1", "HTTP/2"}
	clientOf := [2]*http.Client{cr.clients.h1, cr.clients.h2}
	intended := map[string]int{}
	failures, compared := 0, 0
	for round := 1; round <= 3; round++ {
		for proto := range 2 {
			for v := range 2 {
				s := cr.c.sites[v]
				vals := [2]string{`"none"`, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)}
				fsAddr, flAddr := cr.sites[v][kindFileServer][proto], cr.sites[v][kindFlash][proto]
				for _, rq := range reqs {
					if rq.variants != nil && !slices.Contains(rq.variants, v) {
						continue
					}
					pr := rq.build(cr.c, s.prefix, vals)
					where := fmt.Sprintf("round %d, %s, site %d, %s", round, protoNames[proto], v+1, pr)
					fl := do(clientOf[proto], flAddr.base, flAddr.host, pr)
					if fl.err == nil && fl.proto != proto+1 {
						t.Fatalf("%s: flash_serve answered over HTTP/%d", where, fl.proto)
					}
					if rq.flash != nil {
						err := fl.err
						if err == nil {
							err = rq.flash(fl)
						}
						if err != nil {
							failures++
							t.Errorf("%s: flash_serve: %v", where, err)
						}
						continue
					}
					fs := do(clientOf[proto], fsAddr.base, fsAddr.host, pr)
					if fs.err == nil && fs.proto != proto+1 {
						t.Fatalf("%s: file_server answered over HTTP/%d", where, fs.proto)
					}
					if rq.validators && fs.err == nil && fs.header.Get("Etag") != "" {
						vals = [2]string{fs.header.Get("Etag"), fs.header.Get("Last-Modified")}
					}
					compared++
					fs, fl = withoutListingNoise(fs, fl, fmt.Sprint(fsAddr.port), fmt.Sprint(flAddr.port))
					diffs := allHeaderDifferences(fs, fl)
					if len(diffs) == 0 {
						continue
					}
					if name, ok := intendedReason(pr, fs, fl); ok {
						intended[name]++
						continue
					}
					failures++
					if failures <= 12 {
						t.Errorf("%s:\n\t%s", where, strings.Join(diffs, "\n\t"))
					}
				}
			}
		}
	}
	if failures > 0 {
		t.Errorf("%d answers differ from file_server's (or fail their check) without an intended reason, of %d", failures, compared)
	}
	for name, n := range intended {
		t.Logf("intended difference %q: %d answers", name, n)
	}
}
