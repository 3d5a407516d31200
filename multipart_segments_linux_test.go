//go:build linux && !flashserve_portable

package flashserve

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMultipartRangesLeaveInOneSegment: a multipart/byteranges answer of
// 16 small ranges of a file flash_serve copies from memory is about 2 KiB
// in all: net/http's 4 KiB buffer sent it, headers and every part, in one
// write. With the body's writes gathered per Send, each part's Send ends
// by flushing net/http's writer and sending what was gathered, so the
// response leaves as one write per part: the change meant to send a
// response in fewer segments sends this one in many more.
func TestMultipartRangesLeaveInOneSegment(t *testing.T) {
	root := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 512) // 8 KiB
	if err := os.WriteFile(filepath.Join(root, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("memory_cache 16MiB max_file 64KiB")))
	sc := newSegmentCountingClient(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/f.bin", port)
	var specs []string
	for i := range 16 {
		specs = append(specs, fmt.Sprintf("%d-%d", i*500, i*500+9))
	}
	sc.fetch(t, "GET", url, "") // opens the connection and fills the memory cache
	for round := range 3 {
		resp, body, segs := sc.fetch(t, "GET", url, "bytes="+strings.Join(specs, ","))
		if resp.StatusCode != http.StatusPartialContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
		_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if err != nil {
			t.Fatal(err)
		}
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		parts := 0
		for ; ; parts++ {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(p)
			if want := data[parts*500 : parts*500+10]; !bytes.Equal(got, want) {
				t.Fatalf("part %d: %q, want %q", parts, got, want)
			}
		}
		t.Logf("round %d: %d parts, %d body bytes, %d data segments", round, parts, len(body), segs)
		if parts != 16 {
			t.Fatalf("%d parts, want 16", parts)
		}
		if segs > 2 {
			t.Errorf("round %d: a %d-byte multipart response came in %d segments, want at most 2", round, len(body), segs)
		}
	}
}
