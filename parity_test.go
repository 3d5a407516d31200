package flashserve

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/quic-go/quic-go/http3"
)

// The parity suite starts one Caddy with file_server and flash_serve on the
// same root, replays a corpus of generated requests against both over
// HTTP/1.1, HTTP/2 and HTTP/3, and compares what comes back.

const paritySeed = 20261129

// parityHeaders are the response headers compared between the servers.
var parityHeaders = []string{
	"Content-Type", "Content-Length", "Content-Range", "Etag", "Last-Modified",
	"Vary", "Content-Encoding", "Location", "Allow",
}

// fixture is the tree both servers serve, and the content of every file in
// it by ETag, so that any body flash_serve sends can be checked on its own.
type fixture struct {
	root   string
	byETag map[string][]byte
	files  []string // request paths of the regular files
	sizes  map[string]int64
}

func buildFixture(t testing.TB) *fixture {
	t.Helper()
	fx := &fixture{root: t.TempDir(), byETag: map[string][]byte{}, sizes: map[string]int64{}}
	rng := rand.New(rand.NewPCG(paritySeed, 1))
	mtime := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	write := func(rel string, content []byte) {
		p := filepath.Join(fx.root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		// Distinct mtimes make every ETag distinct.
		mtime = mtime.Add(time.Second + 7*time.Millisecond)
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		fx.byETag[etagOf(info)] = content
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return b
	}
	sizes := []int{0, 1, 511, 512, 513, 4096, 65535, 65536, 65537, 1 << 20}
	exts := []string{".txt", ".bin", ".html", ".css", ".js", ".zzunknown", ""}
	for i, n := range sizes {
		rel := fmt.Sprintf("f%d%s", n, exts[i%len(exts)])
		write(rel, random(n))
		fx.files = append(fx.files, "/"+rel)
		fx.sizes["/"+rel] = int64(n)
	}
	write("withindex/index.html", random(700))
	write("withindex/other.txt", random(300))
	write("txtindex/index.txt", random(100))
	write("noindex/file.txt", random(200))
	write("a/b/c.txt", random(1500))
	write("with space.txt", random(64))
	write("ünïcode.txt", random(65))
	write("100%.txt", random(66))
	write("a+b.txt", random(67))
	write(".secret", random(10))
	write("notes.bak", random(11))
	write("private/x.txt", random(12))
	write("private/index.html", random(13))
	comp := random(5000)
	write("comp.txt", comp)
	write("comp.txt.gz", random(900))
	write("comp.txt.br", random(800))
	write("comp.txt.zst", random(850))
	write("onlygz.js", random(3000))
	write("onlygz.js.gz", random(400))
	write("withindex/index.html.gz", random(350))
	for _, rel := range []string{"withindex/other.txt", "a/b/c.txt", "with space.txt", "comp.txt", "onlygz.js"} {
		fx.files = append(fx.files, "/"+rel)
	}
	return fx
}

func etagOf(info os.FileInfo) string {
	return `"` + strconv.FormatInt(info.ModTime().UnixNano(), 36) + "-" + strconv.FormatInt(info.Size(), 36) + `"`
}

// parityServers are the addresses of the four sites.
type parityServers struct {
	h1FileServer, h1Flash   string // http://127.0.0.1:port
	tlsFileServer, tlsFlash string // 127.0.0.1:port, served as https://localhost
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1, as
// HTTP/3 listens on the UDP port of the same number.
// portsHandedOut holds the ports freePort returned in this process.
var portsHandedOut sync.Map

func freePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			// A port closed here can come back from the next Listen: two
			// sites of one config then share it ("ambiguous site
			// definition", seen once in CI). Each port is handed out once.
			if _, dup := portsHandedOut.LoadOrStore(port, true); dup {
				continue
			}
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// startParityCaddy loads a Caddyfile with the four sites and waits until
// TLS is ready. Caddy is stopped when the test ends.
func startParityCaddy(t testing.TB, root, handlerBlock, after string) parityServers {
	t.Helper()
	p := [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
	// One route, so that the handler and what comes after it run in order.
	site := func(addr, handler string) string {
		return siteAt(addr, root, block("route", handler+" "+handlerBlock, after))
	}
	g := caddyGlobals{options: []string{"skip_install_trust", "local_certs", "auto_https disable_redirects"}, protocols: "h1 h2 h3"}
	loadCaddyfile(t, g.text(t)+
		site(fmt.Sprintf("http://127.0.0.1:%d", p[0]), "file_server")+
		site(fmt.Sprintf("http://127.0.0.1:%d", p[1]), "flash_serve")+
		site(fmt.Sprintf("https://localhost:%d", p[2]), "file_server")+
		site(fmt.Sprintf("https://localhost:%d", p[3]), "flash_serve"))
	s := parityServers{
		h1FileServer:  fmt.Sprintf("http://127.0.0.1:%d", p[0]),
		h1Flash:       fmt.Sprintf("http://127.0.0.1:%d", p[1]),
		tlsFileServer: fmt.Sprintf("127.0.0.1:%d", p[2]),
		tlsFlash:      fmt.Sprintf("127.0.0.1:%d", p[3]),
	}
	// The internal CA issues the certificates in the background.
	c := newClients(t)
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{s.tlsFileServer, s.tlsFlash} {
		eventually(t, time.Until(deadline), func() error {
			req, _ := http.NewRequest("HEAD", "https://"+addr+"/", nil)
			req.Host = "localhost:" + portOf(addr)
			resp, err := c.h2.Do(req)
			if err != nil {
				return fmt.Errorf("TLS on %s not ready: %w", addr, err)
			}
			resp.Body.Close()
			return nil
		})
	}
	return s
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

type clients struct {
	h1, h2, h3 *http.Client
}

func newClients(t testing.TB) clients {
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tlsConf := &tls.Config{ServerName: "localhost", InsecureSkipVerify: true} // test CA, loopback only
	h1 := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}
	h2 := &http.Transport{DisableCompression: true, ForceAttemptHTTP2: true, TLSClientConfig: tlsConf.Clone()}
	h3 := &http3.Transport{DisableCompression: true, TLSClientConfig: tlsConf.Clone()}
	t.Cleanup(func() {
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
		h3.Close()
	})
	mk := func(rt http.RoundTripper) *http.Client {
		return &http.Client{Transport: rt, CheckRedirect: noRedirect, Timeout: 20 * time.Second}
	}
	return clients{h1: mk(h1), h2: mk(h2), h3: mk(h3)}
}

// parityRequest is one request of the corpus.
type parityRequest struct {
	method string
	target string // raw request target: path and query, percent-encoded
	header http.Header
}

func (pr parityRequest) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", pr.method, pr.target)
	for _, k := range []string{"Accept-Encoding", "Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"} {
		if v := pr.header.Get(k); v != "" {
			fmt.Fprintf(&b, " [%s: %s]", k, v)
		}
	}
	return b.String()
}

type parityResponse struct {
	status   int
	proto    int // the HTTP major version the response came over
	header   http.Header
	body     []byte
	err      error
	transfer []string // the response's Transfer-Encoding
}

func do(c *http.Client, base, host string, pr parityRequest) parityResponse {
	req, err := http.NewRequest(pr.method, base+"/", nil)
	if err != nil {
		return parityResponse{err: err}
	}
	// RawPath keeps the target exactly as generated (dot segments, escapes):
	// the client sends EscapedPath, which prefers it.
	target, query, _ := strings.Cut(pr.target, "?")
	if req.URL.Path, err = url.PathUnescape(target); err != nil {
		return parityResponse{err: err}
	}
	req.URL.RawPath = target
	req.URL.RawQuery = query
	if host != "" {
		req.Host = host
	}
	req.Header = pr.header.Clone()
	resp, err := c.Do(req)
	if err != nil {
		return parityResponse{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return parityResponse{status: resp.StatusCode, proto: resp.ProtoMajor, header: resp.Header, body: body, err: err, transfer: resp.TransferEncoding}
}

var nonceRE = regexp.MustCompile(`nonce="[^"]*"`)

var boundaryRE = regexp.MustCompile(`boundary=([0-9A-Za-z'()+_,\-./:=?]+)`)

// normalised returns the response with its multipart boundary replaced by a
// fixed word, so that two multipart bodies compare byte for byte.
func (r parityResponse) normalised() parityResponse {
	m := boundaryRE.FindStringSubmatch(r.header.Get("Content-Type"))
	if m == nil {
		return r
	}
	h := r.header.Clone()
	h.Set("Content-Type", strings.Replace(h.Get("Content-Type"), m[1], "BOUNDARY", 1))
	r.header = h
	r.body = bytes.ReplaceAll(r.body, []byte(m[1]), []byte("BOUNDARY"))
	return r
}

// intendedDifference is a difference between flash_serve and file_server
// that exists on purpose. applies must recognise exactly the requests it
// covers; the README lists each of them.
type intendedDifference struct {
	name, reason string
	applies      func(pr parityRequest, fs, fl parityResponse) bool
}

var intendedDifferences = []intendedDifference{
	{
		name:   "coalesced ranges",
		reason: "overlapping or out-of-order ranges are sorted and merged (RFC 9110 §14.3, CVE-2011-3192); file_server sends them as asked",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return partial(fs) && partial(fl) && rangesOverlapOrDisorder(pr.header.Get("Range"))
		},
	},
	{
		name:   "more ranges than max_ranges",
		reason: "a request for more than max_ranges (16) ranges gets the whole file, as nginx's max_ranges does; file_server sends any number of parts",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return strings.Count(pr.header.Get("Range"), ",") >= defaultMaxRanges && partial(fs) && !partial(fl)
		},
	},
	{
		name:   "zero-length suffix range",
		reason: "bytes=-0 is unsatisfiable (RFC 9110 §14.1.1); net/http answers it with an empty 206 whose range ends before it starts",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return strings.Contains(pr.header.Get("Range"), "-0") && partial(fs)
		},
	},
	{
		name:   "suffix range on an empty file",
		reason: "an empty file has no satisfiable range, so it is served whole (200); net/http answers 206 with Content-Range bytes 0--1/0",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return fs.header.Get("Content-Range") == "bytes 0--1/0" && fl.header.Get("Content-Range") == ""
		},
	},
	{
		name: "Content-Length of a precompressed file with a Range header",
		reason: "flash_serve always declares the length; file_server leaves it out when a sidecar is sent " +
			"to a request with a Range header, and a large body is then chunked",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return fs.header.Get("Content-Encoding") != "" && pr.header.Get("Range") != "" &&
				// quic-go's server declares 0 for a HEAD whose handler declared nothing.
				(fs.header.Get("Content-Length") == "" || pr.method == http.MethodHead && fs.header.Get("Content-Length") == "0") &&
				fl.header.Get("Content-Length") != "" &&
				(pr.method == http.MethodHead || fl.header.Get("Content-Length") == strconv.Itoa(len(fl.body)))
		},
	},
	{
		name: "no sidecar Content-Length on 405 and 412",
		reason: "file_server declares the sidecar's length on a 405 or 412 that has no body, so the client " +
			"reads a truncated response; flash_serve declares no body",
		applies: func(pr parityRequest, fs, fl parityResponse) bool {
			return fs.header.Get("Content-Encoding") != "" && fs.header.Get("Content-Length") != "" &&
				(fs.status == http.StatusMethodNotAllowed || fs.status == http.StatusPreconditionFailed) &&
				fl.status == fs.status && len(fl.body) == 0 &&
				(fl.header.Get("Content-Length") == "" || fl.header.Get("Content-Length") == "0")
		},
	},
}

// intendedReason names the intended difference that explains how fl
// differs from fs for request pr, if one does.
func intendedReason(pr parityRequest, fs, fl parityResponse) (string, bool) {
	for _, d := range intendedDifferences {
		if d.applies(pr, fs, fl) {
			return d.name, true
		}
	}
	return "", false
}

// withoutListingNoise takes out of a directory listing what differs
// between two servers by design: the port it was served on and the
// random CSP nonce, in the body and in the Content-Security-Policy.
func withoutListingNoise(fs, fl parityResponse, fsPort, flPort string) (parityResponse, parityResponse) {
	if fl.header.Get("Etag") != "" || !strings.HasPrefix(fl.header.Get("Content-Type"), "text/html") {
		return fs, fl
	}
	// The port only where it follows a colon (host:port): bare, its digits
	// also occur by chance among a listing's sizes and numbers, and
	// replacing those made a listing differ (TestComposition, browse
	// symlinks deny, in one CI run of three).
	fl.body = bytes.ReplaceAll(fl.body, []byte(":"+flPort), []byte(":"+fsPort))
	for _, r := range []*parityResponse{&fs, &fl} {
		r.body = nonceRE.ReplaceAll(r.body, []byte(`nonce="N"`))
		if csp := r.header.Get("Content-Security-Policy"); csp != "" {
			r.header = r.header.Clone()
			r.header.Set("Content-Security-Policy", cspNonceRE.ReplaceAllString(csp, "nonce-N"))
		}
	}
	return fs, fl
}

var cspNonceRE = regexp.MustCompile(`nonce-[0-9A-Za-z+/=_-]+`)

// partial reports whether a response carries ranges, whatever its status
// (a status override can turn a 206 into anything).
func partial(r parityResponse) bool {
	cr := r.header.Get("Content-Range")
	return cr != "" && !strings.HasPrefix(cr, "bytes */") ||
		strings.HasPrefix(r.header.Get("Content-Type"), "multipart/byteranges")
}

func rangesOverlapOrDisorder(h string) bool {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return false
	}
	lastEnd := int64(-1)
	for _, part := range strings.Split(spec, ",") {
		a, b, _ := strings.Cut(strings.TrimSpace(part), "-")
		if a == "" {
			return true // a suffix among several: order depends on the size
		}
		start, _ := strconv.ParseInt(a, 10, 64)
		end := int64(1 << 62)
		if b != "" {
			end, _ = strconv.ParseInt(b, 10, 64)
		}
		if start <= lastEnd {
			return true
		}
		lastEnd = end
	}
	return false
}

// differences lists how fl differs from fs, or nil.
func differences(fs, fl parityResponse) []string {
	var diffs []string
	if fs.err != nil || fl.err != nil {
		if (fs.err == nil) != (fl.err == nil) {
			diffs = append(diffs, fmt.Sprintf("error: file_server %v, flash_serve %v", fs.err, fl.err))
		}
		return diffs
	}
	if fs.status != fl.status {
		diffs = append(diffs, fmt.Sprintf("status: file_server %d, flash_serve %d", fs.status, fl.status))
	}
	nfs, nfl := fs.normalised(), fl.normalised()
	for _, k := range parityHeaders {
		a, b := strings.Join(nfs.header.Values(k), ", "), strings.Join(nfl.header.Values(k), ", ")
		if a != b {
			diffs = append(diffs, fmt.Sprintf("%s: file_server %q, flash_serve %q", k, a, b))
		}
	}
	if !bytes.Equal(nfs.body, nfl.body) {
		diffs = append(diffs, fmt.Sprintf("body: file_server %d bytes, flash_serve %d bytes", len(nfs.body), len(nfl.body)))
	}
	return diffs
}

// checkBody verifies a flash_serve 200 or 206 on its own: the body must be
// the bytes of the file its ETag names, at the ranges it declares.
func (fx *fixture) checkBody(pr parityRequest, r parityResponse) error {
	if pr.method != http.MethodGet || (r.status != http.StatusOK && r.status != http.StatusPartialContent) {
		return nil
	}
	if r.header.Get("Etag") == "" && strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		return nil // a directory listing, rendered by the embedded file_server
	}
	content, ok := fx.byETag[r.header.Get("Etag")]
	if !ok {
		return fmt.Errorf("unknown ETag %q", r.header.Get("Etag"))
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.body)) {
		return fmt.Errorf("Content-Length %q for %d body bytes", cl, len(r.body))
	}
	if r.status == http.StatusOK {
		if !bytes.Equal(r.body, content) {
			return fmt.Errorf("200 body differs from the file")
		}
		return nil
	}
	check := func(cr string, part []byte) error {
		var start, end, size int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &start, &end, &size); err != nil {
			return fmt.Errorf("bad Content-Range %q", cr)
		}
		if size != int64(len(content)) || start > end || end >= size {
			return fmt.Errorf("Content-Range %q outside a file of %d bytes", cr, len(content))
		}
		if !bytes.Equal(part, content[start:end+1]) {
			return fmt.Errorf("part %q differs from the file", cr)
		}
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	if mt != "multipart/byteranges" {
		return check(r.header.Get("Content-Range"), r.body)
	}
	mr := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
	prevEnd := int64(-1)
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("multipart: %v", err)
		}
		b, _ := io.ReadAll(part)
		cr := part.Header.Get("Content-Range")
		if err := check(cr, b); err != nil {
			return err
		}
		var start, end int64
		fmt.Sscanf(cr, "bytes %d-%d/", &start, &end)
		if start <= prevEnd {
			return fmt.Errorf("parts overlap or are out of order at %q", cr)
		}
		prevEnd = end
	}
}

// generateCorpus makes the requests, with a fixed seed. Conditional headers
// use the validators file_server reports, fetched once per path.
func generateCorpus(t testing.TB, fx *fixture, n int, validatorsOf func(target, ae string) (etag, lastMod string)) []parityRequest {
	rng := rand.New(rand.NewPCG(paritySeed, 2))
	targets := []string{
		"/", "/withindex", "/withindex/", "/withindex?q=1", "/withindex/index.html", "/withindex/other.txt/",
		"/txtindex/", "/txtindex", "/noindex", "/noindex/", "/noindex/file.txt", "/missing.txt", "/missing/",
		"/a/b/c.txt", "/a/b/c.txt/", "/a/./b/../b/c.txt", "/a//b/c.txt", "/%61/b/c.txt", "/a/b/",
		"/with%20space.txt", "/%C3%BCn%C3%AFcode.txt", "/100%25.txt", "/a+b.txt", "/a%2Bb.txt",
		"/.secret", "/notes.bak", "/private/x.txt", "/private/", "/private", "/comp.txt", "/comp.txt.gz",
		"/onlygz.js", "/f0.txt/x", "/%2e%2e/%2e%2e/etc/passwd", "/../etc/hostname", "/withindex/../comp.txt",
		"/f1.bin?download=1", "/F1.bin", "/comp.txt?x=%20y",
	}
	targets = append(targets, fx.files...)
	methods := []string{"GET", "GET", "GET", "GET", "GET", "GET", "HEAD", "HEAD", "POST", "OPTIONS"}
	encodings := []string{"", "", "gzip", "br", "zstd", "gzip, br", "br;q=0.5, gzip", "gzip;q=0", "*", "identity", "deflate", "br, zstd, gzip"}
	ranges := []string{
		"bytes=0-0", "bytes=0-99", "bytes=-100", "bytes=100-", "bytes=0-9,20-29", "bytes=0-9,5-15",
		"bytes=20-29,0-9", "bytes=999999999-", "bytes=-0", "bytes=abc", "bytes=5-1", "items=0-1",
		"bytes=0-,0-", "bytes= 1-2 , 4-5", "bytes=0-0,2-2,4-4,6-6,8-8,10-10,12-12,14-14,16-16,18-18,20-20,22-22,24-24,26-26,28-28,30-30,32-32",
		"bytes=-1", "bytes=511-", "bytes=0-511", "bytes=1-1,3-", "bytes=-5,0-1", "bytes=,", "bytes=",
	}
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	// Every range shape on every file, so that none is left to chance.
	var corpus []parityRequest
	for _, target := range fx.files {
		for _, r := range ranges {
			corpus = append(corpus, parityRequest{method: "GET", target: target, header: http.Header{"Range": {r}}})
		}
	}
	for len(corpus) < n {
		pr := parityRequest{
			method: methods[rng.IntN(len(methods))],
			target: targets[rng.IntN(len(targets))],
			header: http.Header{},
		}
		ae := encodings[rng.IntN(len(encodings))]
		if ae != "" {
			pr.header.Set("Accept-Encoding", ae)
		}
		if rng.IntN(2) == 0 {
			pr.header.Set("Range", ranges[rng.IntN(len(ranges))])
		}
		if rng.IntN(3) == 0 {
			etag, lastMod := validatorsOf(pr.target, ae)
			switch rng.IntN(14) {
			case 0:
				pr.header.Set("If-None-Match", etag)
			case 1:
				pr.header.Set("If-None-Match", "W/"+etag)
			case 2:
				pr.header.Set("If-None-Match", "*")
			case 3:
				pr.header.Set("If-None-Match", `"nope", `+etag)
			case 4:
				pr.header.Set("If-None-Match", "garbage")
			case 5:
				pr.header.Set("If-Match", etag)
			case 6:
				pr.header.Set("If-Match", `"nope"`)
			case 7:
				pr.header.Set("If-Match", "W/"+etag)
			case 8:
				pr.header.Set("If-Modified-Since", lastMod)
			case 9:
				pr.header.Set("If-Modified-Since", []string{past, future, "yesterday"}[rng.IntN(3)])
			case 10:
				pr.header.Set("If-Unmodified-Since", []string{past, future, lastMod, "not a date"}[rng.IntN(4)])
			case 11:
				pr.header.Set("If-Range", etag)
				pr.header.Set("Range", "bytes=0-9")
			case 12:
				pr.header.Set("If-Range", []string{lastMod, past, `"nope"`, "W/" + etag}[rng.IntN(4)])
				pr.header.Set("Range", "bytes=1-20")
			case 13:
				pr.header.Set("If-None-Match", `"nope"`)
				pr.header.Set("If-Modified-Since", future)
			}
		}
		corpus = append(corpus, pr)
	}
	return corpus
}

const parityHandlerBlock = `{
		hide .secret *.bak private
		precompressed gzip br zstd
	}`

func TestParityWithFileServer(t *testing.T) {
	skipIfShort(t, "the parity corpus over HTTP/1.1, HTTP/2 and HTTP/3")
	runParity(t, parityHandlerBlock, "", 2000)
}

// TestParityOtherOptions covers the options the first corpus leaves at
// their defaults: index names, pass_thru, ETag files, status overrides,
// browse, max_ranges and disabled canonical URIs.
func TestParityOtherOptions(t *testing.T) {
	skipIfShort(t, "the parity corpus under two other option sets")
	for _, tc := range []struct{ name, block, after string }{
		{"pass_thru and etag files", `{
		index index.txt index.html
		pass_thru
		etag_file_extensions .etag .tag
		precompressed gzip
	}`, `respond "from next" 299`},
		{"status override and browse", `browse {
		status 203
		disable_canonical_uris
	}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { runParity(t, tc.block, tc.after, 700) })
	}
}

func runParity(t *testing.T, handlerBlock, after string, n int) {
	fx := buildFixture(t)
	for rel, tag := range map[string]string{"comp.txt.etag": `"from-etag-file"`, "a/b/c.txt.tag": "W/\"weak-from-file\"\n", "comp.txt.gz.etag": `"gz-etag"`} {
		p := filepath.Join(fx.root, filepath.FromSlash(rel))
		if err := os.WriteFile(p, []byte(tag), 0o644); err != nil {
			t.Fatal(err)
		}
		content, err := os.ReadFile(strings.TrimSuffix(strings.TrimSuffix(p, ".etag"), ".tag"))
		if err != nil {
			t.Fatal(err)
		}
		fx.byETag[strings.TrimSuffix(tag, "\n")] = content
	}
	srv := startParityCaddy(t, fx.root, handlerBlock, after)
	c := newClients(t)

	type validatorKey struct{ target, ae string }
	seen := map[validatorKey][2]string{}
	validatorsOf := func(target, ae string) (string, string) {
		k := validatorKey{target, ae}
		if v, ok := seen[k]; ok {
			return v[0], v[1]
		}
		r := do(c.h1, srv.h1FileServer, "", parityRequest{method: "HEAD", target: target, header: http.Header{"Accept-Encoding": {ae}}})
		etag := `"none"`
		lastMod := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
		if r.err == nil && r.header.Get("Etag") != "" {
			etag, lastMod = r.header.Get("Etag"), r.header.Get("Last-Modified")
		}
		seen[k] = [2]string{etag, lastMod}
		return etag, lastMod
	}
	corpus := generateCorpus(t, fx, n, validatorsOf)

	protocols := []struct {
		name              string
		client            *http.Client
		fileServer, flash string
		host              func(addr string) string
		proto             int
	}{
		{"HTTP/1.1", c.h1, srv.h1FileServer, srv.h1Flash, func(string) string { return "" }, 1},
		{"HTTP/2", c.h2, "https://" + srv.tlsFileServer, "https://" + srv.tlsFlash, func(a string) string { return "localhost:" + portOf(a) }, 2},
		{"HTTP/3", c.h3, "https://" + srv.tlsFileServer, "https://" + srv.tlsFlash, func(a string) string { return "localhost:" + portOf(a) }, 3},
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			intended := map[string]int{}
			statuses := map[int]int{}
			unexplained := 0
			for i, pr := range corpus {
				fs := do(p.client, p.fileServer, p.host(p.fileServer), pr)
				fl := do(p.client, p.flash, p.host(p.flash), pr)
				if fl.err != nil {
					t.Fatalf("request %d %s: flash_serve: %v", i, pr, fl.err)
				}
				if err := fx.checkBody(pr, fl); err != nil {
					t.Errorf("request %d %s: flash_serve body: %v", i, pr, err)
				}
				statuses[fl.status]++
				fs, fl = withoutListingNoise(fs, fl, portOf(p.fileServer), portOf(p.flash))
				diffs := differences(fs, fl)
				if len(diffs) == 0 {
					continue
				}
				if name, ok := intendedReason(pr, fs, fl); ok {
					intended[name]++
				} else {
					unexplained++
					if unexplained <= 25 {
						t.Errorf("request %d %s:\n\t%s", i, pr, strings.Join(diffs, "\n\t"))
					}
				}
			}
			if unexplained > 0 {
				t.Errorf("%d of %d requests differ without an intended reason", unexplained, len(corpus))
			}
			t.Logf("flash_serve statuses: %v", statuses)
			for name, n := range intended {
				t.Logf("intended difference %q: %d requests", name, n)
			}
		})
	}
}
