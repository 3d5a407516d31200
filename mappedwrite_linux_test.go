//go:build linux

package flashserve

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A writer that maps a file MAP_SHARED, closes its descriptor and writes
// through the mapping (databases, some build tools, editors) gives inotify
// nothing to report until it unmaps. Whatever flash_serve keeps of a file
// must then never be sent together with bytes read from the file now.

// mappedFiles are the sizes the mapped-writer tests change: one of
// bench's e class, small enough for the memory cache (max_file 16 KiB),
// one just above it, read from the file, one of the ring's largest
// direct read.
var mappedFiles = []struct {
	name string
	size int
}{{"small.bin", 8 << 10}, {"mid.bin", 20 << 10}, {"big.bin", 64 << 10}}

// generation is a file's content of one generation: old (0) or new (1).
// Every byte of the new one differs from the old one's at its offset, so
// any span of a body tells which generation it came from.
func generation(size, gen int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*31 + 7)
		if gen == 1 {
			b[i] ^= 0x5a
		}
	}
	return b
}

// mappedRequest is one kind of request the tests send for a file.
type mappedRequest struct {
	method, rangeHeader string
}

// mappedRequests are a whole GET, ranges that start inside, at and past
// the first 512 bytes (what net/http copies itself before sendfile), a
// multipart range and a HEAD.
func mappedRequests(size int) []mappedRequest {
	return []mappedRequest{
		{"GET", ""},
		{"GET", fmt.Sprintf("bytes=100-%d", size-100)},
		{"GET", "bytes=0-1023"},
		{"GET", fmt.Sprintf("bytes=700-%d", size-1)},
		{"GET", "bytes=0-99,300-1499"},
		{"HEAD", ""},
	}
}

// mappedSite is a site the tests ask, with the client that asks it.
type mappedSite struct {
	name   string
	base   string
	host   string // the Host header, if not base's
	client *http.Client
	proto  int // the HTTP major version the answers must have
	// sidecar is set for a site that must answer GETs from the gzip
	// sidecar: they ask for gzip.
	sidecar bool
}

// mappedCase is the state of one site and file while the test asks.
type mappedCase struct {
	site     *mappedSite
	file     string
	old, new []byte
	oldETag  map[mappedRequest]string // what each request got before the change
	asked    int                      // requests since the change
	newAt    time.Duration            // when the new content and validators were first seen
	bytesAt  time.Duration            // when new bytes were first seen, with any validators
	mixed    []string                 // answers that were neither generation
}

// ask sends r for the case's file and reports the generation of the body
// (-1: neither), and the ETag.
func (c *mappedCase) ask(t *testing.T, r mappedRequest) (gen int, etag string, err error) {
	req, _ := http.NewRequest(r.method, c.site.base+"/"+c.file, nil)
	if c.site.host != "" {
		req.Host = c.site.host
	}
	if r.rangeHeader != "" {
		req.Header.Set("Range", r.rangeHeader)
	}
	if c.site.sidecar {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := c.site.client.Do(req)
	if err != nil {
		return -1, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return -1, "", fmt.Errorf("%s %q: reading the body: %w", r.method, r.rangeHeader, err)
	}
	if resp.ProtoMajor != c.site.proto {
		return -1, "", fmt.Errorf("%s: answered over %s", c.site.name, resp.Proto)
	}
	etag = resp.Header.Get("Etag")
	if r.method == http.MethodHead {
		if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength != int64(len(c.old)) {
			return -1, etag, fmt.Errorf("HEAD: %d, Content-Length %d, %d body bytes", resp.StatusCode, resp.ContentLength, len(body))
		}
		return 0, etag, nil
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		return -1, etag, fmt.Errorf("%s %q: status %d", r.method, r.rangeHeader, resp.StatusCode)
	}
	if ce := resp.Header.Get("Content-Encoding"); c.site.sidecar != (ce == "gzip") {
		return -1, etag, fmt.Errorf("%s %q: Content-Encoding %q", r.method, r.rangeHeader, ce)
	}
	pr := parityRequest{method: r.method, target: "/" + c.file, header: req.Header}
	for gen, content := range [][]byte{c.old, c.new} {
		fx := &fixture{byETag: map[string][]byte{etag: content}}
		if fx.checkBody(pr, parityResponse{status: resp.StatusCode, header: resp.Header, body: body}) == nil {
			return gen, etag, nil
		}
	}
	return -1, etag, nil
}

// mapAndChange maps path MAP_SHARED, closes its descriptor and writes
// content through the mapping in one copy. The mapping stays until the
// test ends: unmapping it is what inotify would report.
func mapAndChange(t *testing.T, path string, content []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, len(content), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	copy(m, content)
}

// TestMappedWriteNeverMixesBodies: files of 2, 8 and 64 KiB, asked over
// HTTP/1.1 through the listener wrapper (each transmit policy, behind
// encode, and from their gzip sidecars), without it, over h2c and over
// HTTP/2 with TLS, are changed once
// through a live shared mapping. Every answer, before the change and in
// at least 100 requests per site and file after it (whole, ranges from
// inside and past the first 512 bytes, multipart, HEAD), is all old or
// all new bytes, never the old file's first bytes followed by the new
// file's; and the new content with new validators is served within
// revalidate (2 s here) and some slack. The server runs in this process,
// which owns the files, and (as root) as nobody in a process of its own,
// which neither owns them nor may write them: mincore does not tell it
// what is cached, so its bodies are probed and read otherwise.
func TestMappedWriteNeverMixesBodies(t *testing.T) {
	const revalidate = 2 * time.Second
	t.Run("server owns the files", func(t *testing.T) {
		root := t.TempDir()
		writeMappedFiles(t, root)
		text, sites := mappedSites(t, root, revalidate, caddyGlobals{})
		loadCaddyfile(t, text)
		waitMappedSites(t, sites)
		runMappedChange(t, root, sites, revalidate)
	})
	t.Run("server as another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: to run the server as nobody and write the files it serves")
		}
		// Everything the server needs, under a directory nobody can reach:
		// the files (root's, 0644), the config, a copy of this binary, and
		// a home of its own.
		base := t.TempDir()
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		root, home := filepath.Join(base, "www"), filepath.Join(base, "home")
		for _, d := range []string{root, home} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(home, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		writeMappedFiles(t, root)
		exe := filepath.Join(base, "flashserve.test")
		copyTestBinary(t, exe, 0o755)
		text, sites := mappedSites(t, root, revalidate, caddyGlobals{storage: filepath.Join(home, "storage")})
		config := filepath.Join(base, "Caddyfile")
		if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		child := startCaddyProcessAs(t, "nobody", exe, home, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, runArgs(config))
		waitMappedSites(t, sites)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", child.cmd.Process.Pid))
		if err != nil || !strings.Contains(string(status), "\nUid:\t65534\t") {
			t.Fatalf("the server does not run as nobody (%v):\n%s", err, status)
		}
		runMappedChange(t, root, sites, revalidate)
	})
}

// writeMappedFiles writes the old generation of mappedFiles into dir,
// each also as its gzip sidecar (the same bytes: flash_serve sends a
// sidecar as it is, so they need not be gzip).
func writeMappedFiles(t *testing.T, dir string) {
	t.Helper()
	for _, f := range mappedFiles {
		for _, name := range []string{f.name, f.name + ".gz"} {
			if err := os.WriteFile(filepath.Join(dir, name), generation(f.size, 0), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// copyTestBinary copies this test binary to dst, with mode.
func copyTestBinary(t *testing.T, dst string, mode os.FileMode) {
	t.Helper()
	src, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// mappedSites returns a Caddyfile (g's global options, and more) with a
// site per way a body can leave, all serving root with the given
// revalidate, and the sites with their clients.
func mappedSites(t *testing.T, root string, revalidate time.Duration, g caddyGlobals) (string, []*mappedSite) {
	t.Helper()
	serve := func(opts ...string) string {
		return flashServe(append([]string{"revalidate " + revalidate.String()}, opts...)...)
	}
	h1 := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2}
	gz := &http.Transport{MaxIdleConnsPerHost: 2} // asks for gzip and decodes it
	var h2cProtos http.Protocols
	h2cProtos.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{DisableCompression: true, Protocols: &h2cProtos}
	h2 := &http.Transport{DisableCompression: true, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{ServerName: "localhost", InsecureSkipVerify: true}} // test CA, loopback only
	t.Cleanup(func() {
		for _, tr := range []*http.Transport{h1, gz, h2c, h2} {
			tr.CloseIdleConnections()
		}
	})
	client := func(tr *http.Transport) *http.Client { return &http.Client{Transport: tr, Timeout: 20 * time.Second} }
	var servers, text strings.Builder
	var sites []*mappedSite
	add := func(name string, tr *http.Transport, proto int, serverOpts string, directives ...string) {
		port := freePort(t)
		s := &mappedSite{name: name, base: fmt.Sprintf("http://127.0.0.1:%d", port), client: client(tr), proto: proto}
		addr := s.base
		if tr == h2 {
			addr = fmt.Sprintf("https://localhost:%d", port)
			s.base, s.host = fmt.Sprintf("https://127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)
		}
		if serverOpts != "" {
			servers.WriteString(block(fmt.Sprintf("servers 127.0.0.1:%d", port), serverOpts) + "\n")
		}
		text.WriteString(siteAt(addr, root, directives...))
		sites = append(sites, s)
	}
	add("auto", h1, 1, "", serve())
	add("sendfile", h1, 1, "", serve("transmit sendfile"))
	add("copy", h1, 1, "", serve("transmit copy"))
	add("io_uring", h1, 1, "", serve("transmit io_uring"))
	add("encode", gz, 1, "", "encode gzip", serve())
	add("sidecar", h1, 1, "", serve("precompressed gzip"))
	sites[len(sites)-1].sidecar = true
	add("no wrapper", h1, 1, "protocols h1 h2", serve())
	add("h2c", h2c, 2, block("listener_wrappers", "flash_serve")+"\nprotocols h1 h2c", serve())
	add("h2 over TLS", h2, 2, "", serve())
	// The per-server options come before caddyGlobals' servers block,
	// which would apply to every server otherwise.
	g.options = append(g.options, "skip_install_trust", "local_certs", "auto_https disable_redirects", servers.String())
	return g.text(t) + text.String(), sites
}

// waitMappedSites waits until every site answers: the internal CA issues
// the TLS certificate in the background, and a server of another process
// starts in its own time.
func waitMappedSites(t *testing.T, sites []*mappedSite) {
	t.Helper()
	for _, s := range sites {
		eventually(t, 60*time.Second, func() error {
			req, _ := http.NewRequest("HEAD", s.base+"/", nil)
			if s.host != "" {
				req.Host = s.host
			}
			resp, err := s.client.Do(req)
			if err != nil {
				return fmt.Errorf("%s not ready: %w", s.name, err)
			}
			resp.Body.Close()
			return nil
		})
	}
}

// runMappedChange asks every site for every file until the answers are
// settled and old, changes the files once through shared mappings, then
// asks each site and file at least 100 times more, until the new content
// and validators are served (within revalidate plus slack).
func runMappedChange(t *testing.T, root string, sites []*mappedSite, revalidate time.Duration) {
	t.Helper()
	var cases []*mappedCase
	for _, s := range sites {
		for _, f := range mappedFiles {
			cases = append(cases, &mappedCase{site: s, file: f.name, old: generation(f.size, 0), new: generation(f.size, 1),
				oldETag: map[mappedRequest]string{}})
		}
	}
	// Before the change: three rounds, so that whatever an entry keeps
	// from its second request on is kept.
	for range 3 {
		for _, c := range cases {
			for _, r := range mappedRequests(len(c.old)) {
				gen, etag, err := c.ask(t, r)
				if err != nil || gen != 0 {
					t.Fatalf("%s %s %v before the change: generation %d, %v", c.site.name, c.file, r, gen, err)
				}
				c.oldETag[r] = etag
			}
		}
	}
	// A distinct mtime for the write through the mapping.
	time.Sleep(50 * time.Millisecond)
	changed := time.Now()
	for _, f := range mappedFiles {
		for _, name := range []string{f.name, f.name + ".gz"} {
			mapAndChange(t, filepath.Join(root, name), generation(f.size, 1))
		}
	}
	const want = 100
	bound := revalidate + 8*time.Second
	var wg sync.WaitGroup
	errs := make(chan error, len(sites))
	for _, s := range sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []*mappedCase
			for _, c := range cases {
				if c.site == s {
					mine = append(mine, c)
				}
			}
			for i := 0; ; i++ {
				done := true
				for _, c := range mine {
					if c.asked < want || c.newAt == 0 {
						done = false
					}
				}
				if done || time.Since(changed) > bound {
					return
				}
				for _, c := range mine {
					reqs := mappedRequests(len(c.old))
					r := reqs[i%len(reqs)]
					gen, etag, err := c.ask(t, r)
					if err != nil {
						errs <- fmt.Errorf("%s %s %v: %w", s.name, c.file, r, err)
						return
					}
					c.asked++
					if gen == 1 && r.method == "GET" && c.bytesAt == 0 {
						c.bytesAt = time.Since(changed)
					}
					switch {
					case gen < 0:
						c.mixed = append(c.mixed, fmt.Sprintf("%v after %v", r, time.Since(changed).Round(time.Millisecond)))
					case gen == 1 && r.method == "GET" && r.rangeHeader == "" && etag != c.oldETag[r] && c.newAt == 0:
						c.newAt = time.Since(changed)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var slowest time.Duration
	var firstBytes []string
	for _, c := range cases {
		firstBytes = append(firstBytes, fmt.Sprintf("%s %s %v", c.site.name, c.file, c.bytesAt.Round(time.Millisecond)))
		if len(c.mixed) > 0 {
			t.Errorf("%s %s: %d of %d answers after the change are neither the old nor the new file: %s",
				c.site.name, c.file, len(c.mixed), c.asked, strings.Join(c.mixed[:min(len(c.mixed), 5)], "; "))
		}
		if c.asked < want {
			t.Errorf("%s %s: asked %d times after the change, want %d", c.site.name, c.file, c.asked, want)
		}
		if c.newAt == 0 {
			t.Errorf("%s %s: the new content with new validators not served within %v of the change (revalidate %v)",
				c.site.name, c.file, bound, revalidate)
		}
		slowest = max(slowest, c.newAt)
	}
	t.Logf("new content and validators served %v after the change at the latest (revalidate %v); %d site×file cases",
		slowest.Round(time.Millisecond), revalidate, len(cases))
	t.Logf("new bytes first served after: %s", strings.Join(firstBytes, ", "))
}
