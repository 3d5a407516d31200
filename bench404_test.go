package flashserve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkSite404 is a 404 through the whole Caddy server over one
// keep-alive HTTP/1.1 connection: flash_serve's answer from the negative
// cache beside Caddy's own `respond 404`, in the same process, so that
// their allocations per request (the client's are the same for both) can
// be compared.
func BenchmarkSite404(b *testing.B) {
	root := b.TempDir()
	benchSites(b, root, "/missing.bin", 404, []benchSite{
		{"flash_serve", "flash_serve"},
		{"file_server", "file_server"},
		{"respond", "respond 404"},
	})
}

// BenchmarkSiteHit1KiB is workload a of bench/run inside one process: a
// cached 1 KiB file through the whole server, beside file_server and
// beside `respond` with the same body and Content-Type (Caddy's ceiling).
// What flash_serve costs more than respond is what parity with
// file_server's headers and the lookup cost; -benchmem shows it.
func BenchmarkSiteHit1KiB(b *testing.B) {
	root := b.TempDir()
	body := bytes.Repeat([]byte("x"), 1024)
	if err := os.WriteFile(filepath.Join(root, "1k.bin"), body, 0o644); err != nil {
		b.Fatal(err)
	}
	benchSites(b, root, "/1k.bin", 200, []benchSite{
		{"flash_serve", "flash_serve"},
		{"file_server", "file_server"},
		{"respond", fmt.Sprintf("header Content-Type application/octet-stream\n\trespond %q 200", body)},
	})
}

// benchSite is one site of benchSites: its name and its handler lines.
type benchSite struct{ name, handler string }

// BenchmarkSiteDistinct404 is a 404 storm of distinct paths, one per
// request, through the whole server (issue 29's scanners): short names in
// 100 directories that exist, and 3.4 KB paths 380 levels below a
// directory that does not. flash_serve beside file_server and Caddy's
// `respond 404` in one process, each site with the same root directive.
func BenchmarkSiteDistinct404(b *testing.B) {
	root := b.TempDir()
	for k := range 100 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("index%d.html", k)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("dir%d", k)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	deep := strings.Repeat("abcdefgh/", 380)
	sites := []benchSite{
		{"flash_serve", "flash_serve"},
		{"file_server", "file_server"},
		{"respond", "respond 404"},
	}
	b.Run("short", func(b *testing.B) {
		benchSitesPaths(b, root, func(i int) string { return fmt.Sprintf("/dir%d/r%09d.html", i%100, i) }, 404, sites)
	})
	b.Run("deep", func(b *testing.B) {
		benchSitesPaths(b, root, func(i int) string { return fmt.Sprintf("/nx%09d/abcdefgh/%sf.html", i, deep) }, 404, sites)
	})
}

// benchSites serves root through each site in one Caddy process and
// measures one keep-alive HTTP/1.1 round trip of path per iteration,
// checking the status and reading the whole body.
func benchSites(b *testing.B, root, path string, status int, sites []benchSite) {
	benchSitesPaths(b, root, func(int) string { return path }, status, sites)
}

// benchSitesPaths is benchSites with the path of each request given by
// path: the i-th of each site's run (from 1; 0 is the first request,
// before the timer).
func benchSitesPaths(b *testing.B, root string, path func(i int) string, status int, sites []benchSite) {
	ports := make([]int, len(sites))
	var cfg bytes.Buffer
	for i, s := range sites {
		ports[i] = freePort(b)
		fmt.Fprintf(&cfg, "http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s\n\t%s\n}\n", ports[i], root, s.handler)
	}
	loadSites(b, "", cfg.String())
	for i, site := range sites {
		b.Run(site.name, func(b *testing.B) {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[i]))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			host := fmt.Sprintf("127.0.0.1:%d", ports[i])
			want := []byte(fmt.Sprintf("HTTP/1.1 %d ", status))
			br := bufio.NewReaderSize(conn, 4096)
			var req []byte
			n := 0
			roundTrip := func() {
				req = fmt.Appendf(req[:0], "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path(n), host)
				n++
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				line, err := br.ReadSlice('\n')
				if err != nil || !bytes.HasPrefix(line, want) {
					b.Fatalf("status line %q: %v", line, err)
				}
				length := int64(-1)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if len(line) == 2 {
						break
					}
					if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
						length, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
					}
				}
				if length < 0 {
					b.Fatal("no Content-Length")
				}
				if _, err := io.CopyN(io.Discard, br, length); err != nil {
					b.Fatal(err)
				}
			}
			roundTrip() // the first request fills the cache
			b.ReportAllocs()
			for b.Loop() {
				roundTrip()
			}
		})
	}
}
