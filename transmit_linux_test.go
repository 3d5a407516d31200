//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/transmit"
)

func TestSendfileCarriesTheBody(t *testing.T) {
	s := startEngineSites(t)
	// A sparse file of 1 GiB: no disk space, and every byte is zero.
	big := filepath.Join(s.root, "sparse-1g.bin")
	if err := os.Truncate(big, 0); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 30)
	f.Close()
	get := func(rg string) (int64, int64) {
		before := transmit.Snapshot().SendfileBytes
		// The sendfile engine: auto would read the holes of a sparse file
		// through io_uring, since they are never in the page cache
		// (TestColdBodiesGoThroughTheRing shows auto's sendfile for
		// resident data).
		req, _ := http.NewRequest("GET", s.base[transmit.PolicySendfile]+"/sparse-1g.bin", nil)
		if rg != "" {
			req.Header.Set("Range", rg)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var zero [64 << 10]byte
		buf := make([]byte, 64<<10)
		var n int64
		for {
			m, err := resp.Body.Read(buf)
			if !bytes.Equal(buf[:m], zero[:m]) {
				t.Fatalf("non-zero byte in a sparse file near offset %d", n)
			}
			n += int64(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// The server counts a sendfile call's bytes when it returns, which
		// can be just after the client has read them.
		want := n - sniffLen
		deadline := time.Now().Add(2 * time.Second)
		for transmit.Snapshot().SendfileBytes-before < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		return n, transmit.Snapshot().SendfileBytes - before
	}
	n, viaSendfile := get("")
	if n != 1<<30 {
		t.Fatalf("got %d bytes of 1 GiB", n)
	}
	// net/http sends the first 512 bytes with the headers; the rest must
	// have gone through sendfile, not read and write.
	if viaSendfile < n-sniffLen {
		t.Fatalf("only %d of %d body bytes went through sendfile", viaSendfile, n)
	}
	n, viaSendfile = get("bytes=1048576-1114111")
	if n != 64<<10 || viaSendfile < n-sniffLen {
		t.Fatalf("range: %d bytes, %d through sendfile", n, viaSendfile)
	}
}
