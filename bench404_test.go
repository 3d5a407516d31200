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

// benchSites serves root through each site in one Caddy process and
// measures one keep-alive HTTP/1.1 round trip of path per iteration,
// checking the status and reading the whole body.
func benchSites(b *testing.B, root, path string, status int, sites []benchSite) {
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
			req := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", path, ports[i]))
			want := []byte(fmt.Sprintf("HTTP/1.1 %d ", status))
			br := bufio.NewReaderSize(conn, 4096)
			roundTrip := func() {
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
