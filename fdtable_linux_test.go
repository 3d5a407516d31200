//go:build linux

package flashserve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fdTableFiller fills this process's fd table: RLIMIT_NOFILE is lowered
// to a little above the descriptors open now and the rest are taken with
// /dev/null, so that the next open anywhere in the process fails with
// EMFILE, deterministically, until release.
type fdTableFiller struct {
	t       testing.TB
	old     syscall.Rlimit
	taken   []int
	lowered bool
}

func newFDTableFiller(t testing.TB) *fdTableFiller {
	f := &fdTableFiller{t: t}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &f.old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.release)
	return f
}

// fill takes every free descriptor.
func (f *fdTableFiller) fill() {
	f.t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		f.t.Fatal(err)
	}
	low := f.old
	low.Cur = uint64(len(ents) + 32)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		f.t.Fatal(err)
	}
	f.lowered = true
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == syscall.EMFILE {
			return
		}
		if err != nil {
			f.t.Fatal(err)
		}
		f.taken = append(f.taken, fd)
		if len(f.taken) > 1<<16 {
			f.t.Fatal("the fd table never filled")
		}
	}
}

// release gives the descriptors and the limit back.
func (f *fdTableFiller) release() {
	for _, fd := range f.taken {
		syscall.Close(fd)
	}
	f.taken = f.taken[:0]
	if f.lowered {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &f.old); err != nil {
			f.t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
		f.lowered = false
	}
}

// keepAliveConn is an HTTP/1.1 connection opened before the fd table
// fills: its requests need no new descriptor on either side.
type keepAliveConn struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

func dialKeepAlive(t testing.TB, port int) *keepAliveConn {
	t.Helper()
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &keepAliveConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (c *keepAliveConn) get(path string, header ...string) (*http.Response, []byte) {
	c.t.Helper()
	c.conn.SetDeadline(time.Now().Add(20 * time.Second))
	var extra strings.Builder
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&extra, "%s: %s\r\n", header[i], header[i+1])
	}
	if _, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n", path, extra.String()); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("GET %s: body: %v", path, err)
	}
	if resp.Close {
		c.t.Fatalf("GET %s: the server closed the connection (status %d)", path, resp.StatusCode)
	}
	return resp, b
}

// TestFullFDTableAnswers503EverywhereALookupOpens: with the process's fd
// table full, every lookup that needs a descriptor answers 503 with
// Retry-After, wherever in the lookup it is needed: a second index file
// after the first, an index file, a precompressed sidecar, an ETag file,
// a listing by the embedded file_server (symlinks follow) or by the
// confined one (symlinks beneath), and under handle_errors, whose error
// page is served with that 503. Never a 404 for a page that exists (which
// caches keep), a listing in place of an index, or a 500. Each request
// runs on a connection opened before the table filled, with everything
// else its lookup needs cached and idle descriptors given back, so that
// the cache's shed cannot make room: the one open left is the one the
// case names.
func TestFullFDTableAnswers503EverywhereALookupOpens(t *testing.T) {
	root := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("compressible page\n"))
	zw.Close()
	files := map[string]string{
		"dir/index.html":   "<p>index</p>\n",
		"dir2/index.txt":   "second index\n",
		"list/a.txt":       "listed\n",
		"page.txt":         "compressible page\n",
		"page.txt.gz":      gz.String(),
		"tagged.txt":       "tagged\n",
		"tagged.txt.etag":  `"from-the-etag-file"`,
		"error.html":       "<p>error page</p>\n",
		"kept.txt":         "kept in the cache\n",
		"sub/deep/file.md": "deep\n",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "list", "link.txt")); err != nil {
		t.Fatal(err)
	}
	// warm puts lookups in the shared cache without the sidecar and ETag
	// file lookups of site a; every site has the cache's default settings.
	warm, a, beneath, errs := freePort(t), freePort(t), freePort(t), freePort(t)
	loadSites(t, "", siteBlock(warm, root, "flash_serve")+
		siteBlock(a, root, flashServe("browse", "precompressed gzip", "etag_file_extensions .etag"))+
		siteBlock(beneath, root, flashServe("browse", "symlinks beneath"))+
		siteBlock(errs, root, "flash_serve", block("handle_errors", "rewrite * /error.html", "flash_serve")))
	conns := map[int]*keepAliveConn{}
	for _, port := range []int{warm, a, beneath, errs} {
		conns[port] = dialKeepAlive(t, port)
	}
	// purgeFiles drops every regular file's entry (the directories' and
	// the negative ones stay): their descriptors close, and the cache has
	// none left to shed.
	purgeFiles := func() {
		for name := range files {
			caches.Range(func(_, v any) bool {
				v.(*sharedCache).Purge(filepath.Join(root, name), false)
				return true
			})
		}
	}
	filler := newFDTableFiller(t)
	type check struct {
		name   string
		port   int
		path   string
		header []string
		// cached are the request paths looked up on the warm site
		// before the table fills.
		cached []string
		// want is the status with the fd table free and wantBody a part
		// of its body; full is the status with the table full, and
		// fullBody a part of its body then.
		want           int
		wantBody       string
		full           int
		fullBody       string
		retryAfterFull bool
	}
	checks := []check{
		{name: "index file", port: a, path: "/dir/", want: 200, wantBody: "<p>index</p>", full: 503, retryAfterFull: true},
		{name: "second index file", port: a, path: "/dir2/", want: 200, wantBody: "second index", full: 503, retryAfterFull: true},
		{name: "precompressed sidecar", port: a, path: "/page.txt", header: []string{"Accept-Encoding", "gzip"}, cached: []string{"/page.txt"},
			want: 200, wantBody: gz.String(), full: 503, retryAfterFull: true},
		{name: "ETag file", port: a, path: "/tagged.txt", cached: []string{"/tagged.txt"}, want: 200, wantBody: "tagged", full: 503, retryAfterFull: true},
		{name: "listing by file_server", port: a, path: "/list/", want: 200, wantBody: "a.txt", full: 503, retryAfterFull: true},
		{name: "confined listing", port: beneath, path: "/list/", want: 200, wantBody: "link.txt", full: 503, retryAfterFull: true},
		// The error route's own lookup of its page fails too (a cached
		// page would be an idle descriptor the shed closes, and the
		// index would then open): Caddy writes the first error's status,
		// with the headers it set.
		{name: "index file under handle_errors", port: errs, path: "/dir/", want: 200, wantBody: "<p>index</p>", full: 503, retryAfterFull: true},
		{name: "a cached file", port: a, path: "/kept.txt", cached: []string{"/kept.txt"}, want: 200, wantBody: "kept in the cache", full: 200, fullBody: "kept in the cache"},
	}
	for _, c := range checks {
		resp, body := conns[c.port].get(c.path, c.header...)
		if resp.StatusCode != c.want || !strings.Contains(string(body), c.wantBody) {
			t.Fatalf("%s (%s) with the fd table free: %d %q; want %d with %q", c.name, c.path, resp.StatusCode, body, c.want, c.wantBody)
		}
		purgeFiles()
		for _, p := range c.cached {
			if resp, _ := conns[warm].get(p); resp.StatusCode != 200 {
				t.Fatalf("%s: warming %s: %d", c.name, p, resp.StatusCode)
			}
		}
		filler.fill()
		resp, body = conns[c.port].get(c.path, c.header...)
		filler.release()
		retryAfter := resp.Header.Get("Retry-After")
		switch {
		case resp.StatusCode != c.full:
			t.Errorf("%s (%s) with the fd table full: status %d %q; want %d", c.name, c.path, resp.StatusCode, body, c.full)
		case !strings.Contains(string(body), c.fullBody):
			t.Errorf("%s (%s) with the fd table full: body %q; want it to hold %q", c.name, c.path, body, c.fullBody)
		case c.retryAfterFull && retryAfter == "":
			t.Errorf("%s (%s) with the fd table full: %d without Retry-After", c.name, c.path, resp.StatusCode)
		default:
			t.Logf("%s (%s) with the fd table full: %d, Retry-After %q", c.name, c.path, resp.StatusCode, retryAfter)
		}
		// And the same request is answered again once the table has room.
		if resp, body := conns[c.port].get(c.path, c.header...); resp.StatusCode != c.want || !strings.Contains(string(body), c.wantBody) {
			t.Errorf("%s (%s) after the fd table emptied: %d %q; want %d", c.name, c.path, resp.StatusCode, body, c.want)
		}
	}
}
