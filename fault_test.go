//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

const (
	gib          = 1 << 30
	markerEvery  = 64 << 20
	markerLength = 4096
)

// sparseGiB makes a 1 GiB sparse file with a 4 KiB marker every 64 MiB,
// so that a body can be checked as it streams, without holding it.
func sparseGiB(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(gib); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < gib; off += markerEvery {
		if _, err := f.WriteAt(marker(off), off); err != nil {
			t.Fatal(err)
		}
	}
}

func marker(off int64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%016x", off)), markerLength/16)
}

// zeroBlock is what a hole of a sparseGiB file is compared with.
var zeroBlock = make([]byte, 64<<10)

// bodyChecker verifies a sparseGiB body as it is written to it.
type bodyChecker struct {
	off int64
	bad error
}

func (c *bodyChecker) Write(p []byte) (int, error) {
	for i := 0; i < len(p) && c.bad == nil; {
		off := c.off + int64(i)
		inMarker := off%markerEvery < markerLength
		var n int
		if inMarker {
			start := off % markerEvery
			n = min(len(p)-i, int(markerLength-start))
			if !bytes.Equal(p[i:i+n], marker(off - start)[start:start+int64(n)]) {
				c.bad = fmt.Errorf("marker bytes differ at offset %d", off)
			}
		} else {
			next := (off/markerEvery + 1) * markerEvery
			n = min(len(p)-i, int(next-off))
			// Block by block: a byte loop over 1 GiB takes minutes under
			// the race detector.
			for j := i; j < i+n; j += len(zeroBlock) {
				k := min(i+n, j+len(zeroBlock))
				if !bytes.Equal(p[j:k], zeroBlock[:k-j]) {
					c.bad = fmt.Errorf("non-zero byte in a hole at offset about %d", c.off+int64(j))
					break
				}
			}
		}
		i += n
	}
	c.off += int64(len(p))
	return len(p), nil
}

// TestFileChangedDuringLargeTransfer changes the file under a 1 GiB
// transfer, with each engine that streams it. A replaced or deleted file
// is still sent whole and exact from the descriptor the transfer holds
// (the old inode lives on), and the next request sees the change; a
// truncated file aborts the connection rather than pad or send other
// bytes. Descriptors, goroutines and threads come back to baseline.
func TestFileChangedDuringLargeTransfer(t *testing.T) {
	skipIfShort(t, "six 1 GiB transfers")
	s := startEngineSites(t)
	// Warm up first: the access logs and the cache's inotify instance are
	// opened on first use, and belong in the baseline.
	warm := &http.Client{Timeout: 10 * time.Second}
	for _, e := range engines {
		get(t, warm, s.base[e]+"/tiny.txt")
	}
	warm.CloseIdleConnections()
	base := settledResources(t)
	for _, engine := range []string{transmit.PolicySendfile, transmit.PolicyCopy} {
		for _, change := range []string{"replace", "delete", "truncate"} {
			t.Run(engine+"/"+change, func(t *testing.T) {
				name := fmt.Sprintf("big-%s-%s.bin", engine, change)
				p := filepath.Join(s.root, name)
				sparseGiB(t, p)
				conn, err := net.Dial("tcp", strings.TrimPrefix(s.base[engine], "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(2 * time.Minute))
				fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", name)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.ContentLength != gib {
					t.Fatalf("status %d, length %d", resp.StatusCode, resp.ContentLength)
				}
				check := &bodyChecker{}
				// Read 8 MiB, then change the file while the server is blocked
				// on the full socket.
				if _, err := io.CopyN(check, resp.Body, 8<<20); err != nil {
					t.Fatal(err)
				}
				switch change {
				case "replace":
					tmp := p + ".new"
					if err := os.WriteFile(tmp, []byte("replacement\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(tmp, p); err != nil {
						t.Fatal(err)
					}
				case "delete":
					if err := os.Remove(p); err != nil {
						t.Fatal(err)
					}
				case "truncate":
					if err := os.Truncate(p, 16<<20); err != nil {
						t.Fatal(err)
					}
				}
				n, err := io.Copy(check, resp.Body)
				total := 8<<20 + n
				if check.bad != nil {
					t.Fatalf("corrupted body: %v", check.bad)
				}
				if change == "truncate" {
					if err == nil || total >= gib {
						t.Fatalf("a truncated file gave %d bytes and %v; want a cut connection", total, err)
					}
					os.Remove(p)
					return
				}
				if err != nil || total != gib {
					t.Fatalf("got %d bytes (%v), want the whole old file", total, err)
				}
				// The next request sees the change: at once with inotify, within
				// a second without it (the portable build). HEAD, so that a poll
				// that still finds the old file does not read 1 GiB.
				c := &http.Client{Timeout: 10 * time.Second}
				waitFor(t, "the change to be seen", 3*time.Second, func() bool {
					resp, err := c.Head(s.base[engine] + "/" + name)
					if err != nil {
						return false
					}
					resp.Body.Close()
					if change == "replace" {
						return resp.StatusCode == 200 && resp.ContentLength == int64(len("replacement\n"))
					}
					return resp.StatusCode == 404
				})
				os.Remove(p)
			})
		}
	}
	backToBaseline(t, base, base.threads+8)
}

// fdStarvedServer is a child Caddy whose RLIMIT_NOFILE a test lowers far
// below what it uses, and raises again.
type fdStarvedServer struct {
	t         *testing.T
	base      string // the site's URL
	adminPort int
	pid       int
	baseFDs   int // its descriptors without a client or a cached file
	old       unix.Rlimit
	client    *http.Client
}

// startFDStarvedServer starts a child Caddy serving root with the
// flash_serve directive's options, waits until probe is served, and
// lowers its RLIMIT_NOFILE to room for clients connections and room more
// descriptors: the cache must live in those.
func startFDStarvedServer(t *testing.T, root, probe string, clients, room int, options ...string) *fdStarvedServer {
	t.Helper()
	port, adminPort := freePort(t), freePort(t)
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	// Logs at INFO, Caddy's default: the child's log is shown on a failure.
	g := caddyGlobals{admin: fmt.Sprintf("127.0.0.1:%d", adminPort), options: []string{block("log", "level INFO")}}
	os.WriteFile(cfg, []byte(g.text(t)+siteBlock(port, root, flashServe(options...))), 0o644)
	child := startCaddyProcess(t, "server", cfg)
	s := &fdStarvedServer{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), adminPort: adminPort, pid: child.cmd.Process.Pid,
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}}
	t.Cleanup(s.client.CloseIdleConnections)
	waitFor(t, "the server", 60*time.Second, func() bool {
		resp, err := s.client.Get(s.base + probe)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	s.client.CloseIdleConnections()
	// The server's descriptors without a client and without the one file
	// it has cached, which the purge at the end closes: once the closed
	// connections are gone on the server's side too (the count stays the
	// same three times in a row), so that the baseline holds none of them.
	s.baseFDs = settled(s.fds) - 1
	if err := unix.Prlimit(s.pid, unix.RLIMIT_NOFILE, nil, &s.old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(s.baseFDs + 1 + clients + room), Max: s.old.Max}
	// The clients' connections are made first: a server whose fd table
	// stays full cannot accept one (its accept loop retries, at most once
	// a second, while the lookups take every descriptor the cache sheds).
	s.connect(probe, clients)
	if err := unix.Prlimit(s.pid, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("RLIMIT_NOFILE of the server lowered to %d (it had %d fds open, %d of them its clients')", low.Cur, s.fds(), clients)
	return s
}

// connect opens n connections to the server, kept idle in the client's
// pool: n requests at once, each holding its connection until all have
// their response headers.
func (s *fdStarvedServer) connect(probe string, n int) {
	var got, wg sync.WaitGroup
	got.Add(n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.client.Get(s.base + probe)
			got.Done()
			if err != nil {
				s.t.Error(err)
				return
			}
			got.Wait()
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
}

// fds counts the child's descriptors.
func (s *fdStarvedServer) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid))
	if err != nil {
		s.t.Fatal(err)
	}
	return len(ents)
}

// restore gives the child its RLIMIT_NOFILE back.
func (s *fdStarvedServer) restore() {
	if err := unix.Prlimit(s.pid, unix.RLIMIT_NOFILE, &s.old, nil); err != nil {
		s.t.Fatal(err)
	}
}

// stats reads the child's /flash_serve/stats.
func (s *fdStarvedServer) stats() Stats {
	status, body := adminCall(s.t, "GET", fmt.Sprintf("http://127.0.0.1:%d/flash_serve/stats", s.adminPort), "")
	var st Stats
	if status != 200 || json.Unmarshal(body, &st) != nil {
		s.t.Fatalf("stats: %d %s", status, body)
	}
	return st
}

// backToBaseline checks that every descriptor is accounted for: with the
// cache purged and the clients gone, the server is back to what it had
// before.
func (s *fdStarvedServer) backToBaseline(root string) {
	s.client.CloseIdleConnections()
	adminCall(s.t, "POST", fmt.Sprintf("http://127.0.0.1:%d/flash_serve/purge", s.adminPort), fmt.Sprintf(`{"prefix": %q}`, root))
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the admin calls'
	waitFor(s.t, "the server's fds to come back", 10*time.Second, func() bool {
		return s.fds() <= s.baseFDs
	})
}

// TestFDExhaustion lowers RLIMIT_NOFILE of a running server, a child
// process, far below what it uses, and sends it cold requests from many
// connections: every answer is the file or a 503 with Retry-After, never
// another error, and once the limit is back every file is served again.
func TestFDExhaustion(t *testing.T) {
	root := t.TempDir()
	const files = 400
	for i := range files {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d.bin", i)), bytes.Repeat([]byte{byte(i)}, 20<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const clients = 16
	s := startFDStarvedServer(t, root, "/f000.bin", clients, 12, "memory_cache 0")
	c := s.client
	base := s.base

	var ok, unavailable atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += clients {
				resp, err := c.Get(fmt.Sprintf("%s/f%03d.bin", base, i))
				if err != nil {
					t.Errorf("f%03d: %v", i, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && len(b) == 20<<10 && b[0] == byte(i):
					ok.Add(1)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					t.Errorf("f%03d with the fd table full: status %d, %d bytes", i, resp.StatusCode, len(b))
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("with the fd table full: %d served, %d answered 503", ok.Load(), unavailable.Load())
	if ok.Load() == 0 {
		t.Error("nothing was served: the cache should shed descriptors and go on")
	}
	s.restore()
	for i := range files {
		status, _, b := get(t, c, fmt.Sprintf("%s/f%03d.bin", base, i))
		if status != 200 || len(b) != 20<<10 {
			t.Fatalf("f%03d after the limit came back: status %d", i, status)
		}
	}
	st := s.stats()
	t.Logf("statacc: %+v; rejected: %v", st.Statacc, st.Rejected)
	if st.Statacc.Shed == 0 {
		t.Error("the cache never met a full fd table: the test proved nothing")
	}
	s.backToBaseline(root)
}

// TestFDExhaustionWithIndexFiles: the same starved server, asked for
// directories (an index file, or a second index name), files with a
// precompressed sidecar and an ETag file, and listings, by many
// connections at once: every answer is the right page or a 503 with
// Retry-After. A directory whose index file could not be opened is never
// a 404 (which caches keep), a listing, or a 500; and with the limit back
// every page is served again.
func TestFDExhaustionWithIndexFiles(t *testing.T) {
	root := t.TempDir()
	const dirs = 150
	type page = struct {
		path, body string
		gzip       bool
	}
	var pages []page
	write := func(name, body string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range dirs {
		body := fmt.Sprintf("<p>page %d</p>\n", i)
		switch i % 3 {
		case 0:
			write(fmt.Sprintf("d%03d/index.html", i), body)
		case 1:
			write(fmt.Sprintf("d%03d/index.txt", i), body) // the second index name
		case 2:
			write(fmt.Sprintf("d%03d/index.html", i), body)
			write(fmt.Sprintf("d%03d/index.html.etag", i), fmt.Sprintf(`"etag-%d"`, i))
		}
		pages = append(pages, page{path: fmt.Sprintf("/d%03d/", i), body: body})
		file := fmt.Sprintf("/f%03d.txt", i)
		write(file, body)
		if i%2 == 0 {
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			zw.Write([]byte(body))
			zw.Close()
			write(file+".gz", gz.String())
		}
		pages = append(pages, page{path: file, body: body, gzip: i%2 == 0})
	}
	write("listing/a.txt", "a\n")
	for _, browse := range []bool{false, true} {
		t.Run(fmt.Sprint("browse ", browse), func(t *testing.T) {
			options := []string{"memory_cache 0", "precompressed gzip", "etag_file_extensions .etag"}
			pages := pages
			if browse {
				options = append(options, "browse")
				pages = append(pages, page{path: "/listing/", body: "a.txt"})
			}
			starveWithPages(t, root, pages, options)
		})
	}
}

// starveWithPages asks the starved server for pages and checks each answer.
func starveWithPages(t *testing.T, root string, pages []struct {
	path, body string
	gzip       bool
}, options []string) {
	const clients = 48
	s := startFDStarvedServer(t, root, "/d000/", clients, 8, options...)
	var ok, unavailable, notFound atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 8*len(pages); i += clients {
				p := pages[i%len(pages)]
				req, _ := http.NewRequest("GET", s.base+p.path, nil)
				// The client's own decompression would hide which body came.
				req.Header.Set("Accept-Encoding", "identity")
				resp, err := s.client.Do(req)
				if err != nil {
					t.Errorf("%s: %v", p.path, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && strings.Contains(string(b), p.body):
					ok.Add(1)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					unavailable.Add(1)
				case resp.StatusCode == 404:
					notFound.Add(1)
					t.Errorf("%s with the fd table full: 404 for a page that exists", p.path)
				default:
					t.Errorf("%s with the fd table full: status %d, %q", p.path, resp.StatusCode, b)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("with the fd table full: %d served, %d answered 503, %d answered 404", ok.Load(), unavailable.Load(), notFound.Load())
	s.restore()
	for _, p := range pages {
		status, _, b := get(t, s.client, s.base+p.path)
		if status != 200 || !strings.Contains(string(b), p.body) {
			t.Fatalf("%s after the limit came back: status %d", p.path, status)
		}
	}
	if st := s.stats(); st.Statacc.Shed == 0 {
		t.Error("the cache never met a full fd table: the test proved nothing")
	}
	s.backToBaseline(root)
}

// TestSlowReadersHoldNoThreads opens connections that ask for a large
// file and never read: the server's sends park on the netpoller, so they
// hold goroutines but no OS threads, other clients are still served, and
// when the readers go away everything is given back.
func TestSlowReadersHoldNoThreads(t *testing.T) {
	s := startEngineSites(t)
	if err := os.WriteFile(filepath.Join(s.root, "slow.bin"), bytes.Repeat([]byte("s"), 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, e := range engines {
		// Cache both files before the baseline: the cache's descriptors
		// belong in it.
		get(t, c, s.base[e]+"/slow.bin")
		get(t, c, s.base[e]+"/tiny.txt")
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	c.CloseIdleConnections()
	base := settledResources(t)
	var conns []net.Conn
	for i := range 300 {
		e := engines[i%len(engines)]
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.base[e], "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// A tiny receive window, so the server's socket fills at once.
		conn.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprint(conn, "GET /slow.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		conns = append(conns, conn)
	}
	// Every reader is being sent its body: its first byte has arrived (the
	// one byte read leaves the socket as full), and every connection's
	// goroutine exists, so that the threads are counted with all 300 sends
	// under way rather than after a guessed delay.
	for i, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
			t.Fatalf("reader %d: no first byte: %v", i, err)
		}
	}
	waitFor(t, "a goroutine for each stalled reader", 10*time.Second, func() bool {
		return runtime.NumGoroutine() >= base.goroutines+len(conns)
	})
	during := countResources(t)
	t.Logf("with 300 stalled readers: %+v (baseline %+v)", during, base)
	if during.threads > base.threads+16 {
		t.Errorf("300 stalled readers hold %d more OS threads; sends must park on the netpoller", during.threads-base.threads)
	}
	for _, e := range engines {
		start := time.Now()
		if status, _, b := get(t, c, s.base[e]+"/tiny.txt"); status != 200 || !bytes.Equal(b, s.files["/tiny.txt"]) {
			t.Errorf("%s: another client got %d while readers stalled", e, status)
		}
		t.Logf("%s: another client served in %v", e, time.Since(start))
	}
	for _, conn := range conns {
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
	c.CloseIdleConnections()
	backToBaseline(t, base, base.threads+16)
}
