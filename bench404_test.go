package flashserve

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"testing"
)

// BenchmarkSite404 is a 404 through the whole Caddy server over one
// keep-alive HTTP/1.1 connection: flash_serve's answer from the negative
// cache beside Caddy's own `respond 404`, in the same process, so that
// their allocations per request (the client's are the same for both) can
// be compared.
func BenchmarkSite404(b *testing.B) {
	root := b.TempDir()
	flash, respond := freePort(b), freePort(b)
	loadSites(b, "", fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s\n\tflash_serve\n}\n"+
		"http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s\n\trespond 404\n}\n", flash, root, respond, root))
	for _, site := range []struct {
		name string
		port int
	}{{"flash_serve", flash}, {"respond", respond}} {
		b.Run(site.name, func(b *testing.B) {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", site.port))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			req := []byte(fmt.Sprintf("GET /missing.bin HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", site.port))
			br := bufio.NewReaderSize(conn, 4096)
			roundTrip := func() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				status, err := br.ReadSlice('\n')
				if err != nil || !bytes.HasPrefix(status, []byte("HTTP/1.1 404 ")) {
					b.Fatalf("status line %q: %v", status, err)
				}
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					if len(line) == 2 {
						return // an empty body: both answer Content-Length: 0
					}
				}
			}
			roundTrip() // the first miss fills the negative cache
			b.ReportAllocs()
			for b.Loop() {
				roundTrip()
			}
		})
	}
}
