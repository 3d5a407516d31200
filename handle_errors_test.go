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

// TestHandleErrorsPagesAsFileServer: with handle_errors serving the error
// page with the same handler, a 404 and a 405 answer three times each as
// file_server's do: status, body, and the headers a handler sets (Vary,
// Allow, Content-Type, Content-Length), with a deferred header rule in
// front, and the answers do not change from one request to the next.
func TestHandleErrorsPagesAsFileServer(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{"404.html": "<p>not here</p>\n", "405.html": "<p>not so</p>\n", "small.txt": "small\n"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	site := func(port int, handler string) string {
		return siteBlock(port, root, `header >Vary "Accept-Encoding" "Accept-Encoding, Origin"`, handler,
			block("handle_errors", "rewrite * /{err.status_code}.html", handler))
	}
	fp, ap := freePort(t), freePort(t)
	loadSites(t, "", site(fp, "flash_serve")+site(ap, "file_server"))
	c := &http.Client{Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	get := func(port int, method, path string) string {
		req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var hs []string
		for _, k := range []string{"Vary", "Allow", "Content-Type", "Content-Length", "Accept-Ranges"} {
			hs = append(hs, k+"="+strings.Join(resp.Header.Values(k), "|"))
		}
		return fmt.Sprintf("%d %q %v", resp.StatusCode, b, hs)
	}
	for _, rq := range [][2]string{{"GET", "/missing"}, {"POST", "/small.txt"}, {"GET", "/small.txt"}} {
		want := get(ap, rq[0], rq[1])
		t.Logf("%s %s: file_server %s", rq[0], rq[1], want)
		for i := range 3 {
			if got := get(fp, rq[0], rq[1]); got != want {
				t.Errorf("%s %s, request %d: flash_serve %s, file_server %s", rq[0], rq[1], i, got, want)
			}
		}
	}
}
