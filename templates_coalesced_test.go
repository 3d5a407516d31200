package flashserve

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fetchWhole makes one GET on a fresh connection and returns the status,
// the headers and the body as far as it came, with the read's error.
func fetchWhole(t *testing.T, url string) (int, http.Header, []byte, error) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// TestTemplatesInFrontOfCoalescedBody: `templates` in front of flash_serve
// buffers the file's body in its recorder and writes the rendered page
// after flash_serve returns, with its own Content-Length. A body
// flash_serve copies (memory_cache) on a cleartext HTTP/1 connection of
// the listener wrapper is gathered (holdHead), and Send's end flushes
// net/http's bottom writer (flushBottom), past the recorder: that sends
// the status and the headers as they are then, with the file's
// Content-Length, before templates has rendered anything. The rendered
// page is then longer or shorter than what the client was promised, and
// a template that fails cannot turn the response into a 500 any more.
// file_server behind the same templates answers with the rendered page.
func TestTemplatesInFrontOfCoalescedBody(t *testing.T) {
	root := t.TempDir()
	pad := strings.Repeat("x", 5000) // past net/http's 4 KiB buffer too
	files := map[string]string{
		"/longer.html":  "<p>{{\"" + strings.Repeat("rendered ", 800) + "\"}}</p>" + pad,
		"/shorter.html": "<p>{{/* a comment the render drops: " + strings.Repeat("c", 3000) + " */}}</p>" + pad,
		"/broken.html":  "<p>{{ .NoSuchField.Deeper }}{{ template \"missing\" }}</p>" + pad,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsPort, flashPort := freePort(t), freePort(t)
	loadSites(t, "",
		siteBlock(fsPort, root, block("route", "templates", "file_server"))+
			siteBlock(flashPort, root, block("route", "templates", flashServe("memory_cache 16MiB max_file 64KiB"))))
	for _, name := range []string{"/longer.html", "/shorter.html", "/broken.html"} {
		wantStatus, wantHdr, want, werr := fetchWhole(t, fmt.Sprintf("http://127.0.0.1:%d%s", fsPort, name))
		if werr != nil {
			t.Fatalf("file_server %s: %v", name, werr)
		}
		for round := range 2 { // the second from the memory cache for sure
			status, hdr, got, err := fetchWhole(t, fmt.Sprintf("http://127.0.0.1:%d%s", flashPort, name))
			t.Logf("%s, round %d: file_server %d, Content-Length %q, %d bytes; flash_serve %d, Content-Length %q, %d bytes, err %v",
				name, round, wantStatus, wantHdr.Get("Content-Length"), len(want), status, hdr.Get("Content-Length"), len(got), err)
			if err != nil || status != wantStatus || string(got) != string(want) {
				t.Errorf("%s, round %d: flash_serve answered %d with %d bytes (read error %v); file_server %d with %d bytes",
					name, round, status, len(got), err, wantStatus, len(want))
			}
		}
	}
}
