package flashserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue finds one sample in a Prometheus text exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("metric %s not found", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func adminCall(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	status, _, b := adminRequest(t, method, url, body)
	return status, b
}

// adminRequest is adminCall with the answer's header.
func adminRequest(t *testing.T, method, url, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestAdminAnswersAreJSON: every answer of the admin endpoints, the 202
// of a prewarm that does not wait as much as the 200s and the 4xx errors,
// says it is JSON and is.
func TestAdminAnswersAreJSON(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	adminPort, sitePort := freePort(t), freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d", adminPort), fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s\n\tflash_serve\n}\n", sitePort, root))
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string // a key the JSON object must have
	}{
		{"GET", "/flash_serve/stats", "", 200, "engines"},
		{"POST", "/flash_serve/purge", fmt.Sprintf(`{"prefix": %q}`, root), 200, "purged"},
		{"POST", "/flash_serve/prewarm", fmt.Sprintf(`{"root": %q, "budget": "1MiB"}`, root), 202, "files"},
		{"POST", "/flash_serve/prewarm", fmt.Sprintf(`{"root": %q, "budget": "1MiB", "wait": true}`, root), 200, "files"},
		{"POST", "/flash_serve/purge", `{"path": "relative"}`, 400, "error"},
		{"POST", "/flash_serve/prewarm", `not json`, 400, "error"},
		{"GET", "/flash_serve/purge", "", 405, "error"},
	} {
		status, h, b := adminRequest(t, c.method, admin+c.path, c.body)
		var obj map[string]any
		err := json.Unmarshal(b, &obj)
		if status != c.status || h.Get("Content-Type") != "application/json" || err != nil || obj[c.field] == nil {
			t.Errorf("%s %s %s: %d, Content-Type %q, body %s (%v); want %d, application/json, an object with %q",
				c.method, c.path, c.body, status, h.Get("Content-Type"), b, err, c.status, c.field)
		}
	}
}

func TestMetricsAndAdminAPI(t *testing.T) {
	root := t.TempDir()
	small := []byte("a small file\n")
	big := bytes.Repeat([]byte("0123456789"), 100<<10) // ~1 MB
	for name, b := range map[string][]byte{"small.txt": small, "big.bin": big} {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	adminPort, sitePort := freePort(t), freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	site := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	loadSites(t, fmt.Sprintf("admin 127.0.0.1:%d\n\tmetrics", adminPort), siteBlock(sitePort, root, "flash_serve"))

	scrape := func(t *testing.T) string {
		t.Helper()
		status, b := adminCall(t, "GET", admin+"/metrics", "")
		if status != 200 {
			t.Fatalf("/metrics: %d %s", status, b)
		}
		return string(b)
	}
	// Each part is a subtest; the parts build on one another's state, so
	// one that stops (t.Fatal) stops the test.
	step := func(name string, part func(t *testing.T)) {
		t.Helper()
		finished := false
		t.Run(name, func(t *testing.T) { part(t); finished = true })
		if !finished {
			t.FailNow()
		}
	}
	before := scrape(t)
	memory0 := metricValue(t, before, `caddy_flash_serve_requests_total{engine="memory"}`)
	sendfile0 := metricValue(t, before, `caddy_flash_serve_bytes_total{engine="`+bigFileEngine+`"}`)
	misses0 := metricValue(t, before, `caddy_flash_serve_statacc_misses_total`)
	hits0 := metricValue(t, before, `caddy_flash_serve_statacc_hits_total`)
	neg0 := metricValue(t, before, `caddy_flash_serve_statacc_negative_hits_total`)

	c := &http.Client{Timeout: 10 * time.Second}
	step("metrics", func(t *testing.T) {
		for range 5 {
			if s, _, b := get(t, c, site+"/small.txt"); s != 200 || !bytes.Equal(b, small) {
				t.Fatalf("small.txt: %d", s)
			}
			if s, _, b := get(t, c, site+"/big.bin"); s != 200 || !bytes.Equal(b, big) {
				t.Fatalf("big.bin: %d", s)
			}
			get(t, c, site+"/nope")
		}
		after := scrape(t)
		if d := metricValue(t, after, `caddy_flash_serve_requests_total{engine="memory"}`) - memory0; d != 5 {
			t.Errorf("memory requests went up by %v, want 5", d)
		}
		if d := metricValue(t, after, `caddy_flash_serve_bytes_total{engine="`+bigFileEngine+`"}`) - sendfile0; d != float64(5*len(big)) {
			t.Errorf("%s bytes went up by %v, want %d", bigFileEngine, d, 5*len(big))
		}
		if d := metricValue(t, after, `caddy_flash_serve_statacc_misses_total`) - misses0; d != 3 {
			t.Errorf("misses went up by %v, want 3 (one per path)", d)
		}
		if d := metricValue(t, after, `caddy_flash_serve_statacc_hits_total`) - hits0; d != 8 {
			t.Errorf("hits went up by %v, want 8", d)
		}
		if d := metricValue(t, after, `caddy_flash_serve_statacc_negative_hits_total`) - neg0; d != 4 {
			t.Errorf("negative hits went up by %v, want 4", d)
		}
		for _, name := range []string{"caddy_flash_serve_statacc_open_files", "caddy_flash_serve_transfers_in_flight",
			`caddy_flash_serve_rejected_total{cause="max_transfers"}`, "caddy_flash_serve_prewarm_bytes_total",
			"caddy_flash_serve_hot_set_resident_bytes", "caddy_flash_serve_statacc_queue_depth",
			"caddy_flash_serve_statacc_invalidations_total", "caddy_flash_serve_statacc_wait_seconds_total",
			"caddy_flash_serve_statacc_negative_evictions_total"} {
			metricValue(t, after, name)
		}
		// Caddy's own metrics are still there, next to ours.
		if !strings.Contains(after, "caddy_http_requests_total") {
			t.Error("Caddy's own HTTP metrics are missing from /metrics")
		}
	})
	step("stats", func(t *testing.T) {
		// The stats endpoint gives the same numbers as JSON.
		status, b := adminCall(t, "GET", admin+"/flash_serve/stats", "")
		var st Stats
		if status != 200 || json.Unmarshal(b, &st) != nil {
			t.Fatalf("/flash_serve/stats: %d %s", status, b)
		}
		if st.Engines[bigFileEngine].Bytes < int64(5*len(big)) || st.Statacc.OpenFiles < 2 || st.Caches < 1 {
			t.Errorf("stats look wrong: %s", b)
		}
	})
	step("purge", func(t *testing.T) {
		// Purge: the next request looks the file up again.
		status, b := adminCall(t, "POST", admin+"/flash_serve/purge", fmt.Sprintf(`{"path": %q}`, filepath.Join(root, "small.txt")))
		if status != 200 || !strings.Contains(string(b), `"purged":1`) {
			t.Fatalf("purge path: %d %s", status, b)
		}
		m1 := metricValue(t, scrape(t), `caddy_flash_serve_statacc_misses_total`)
		get(t, c, site+"/small.txt")
		if d := metricValue(t, scrape(t), `caddy_flash_serve_statacc_misses_total`) - m1; d != 1 {
			t.Errorf("after a purge the next request made %v misses, want 1", d)
		}
		status, b = adminCall(t, "POST", admin+"/flash_serve/purge", fmt.Sprintf(`{"prefix": %q}`, root))
		if status != 200 || !strings.Contains(string(b), `"purged":3`) {
			t.Errorf("purge prefix: %d %s (want the 3 entries under the root)", status, b)
		}
	})
	step("bad requests", func(t *testing.T) {
		// Bad requests get a 400 that says why, and change nothing.
		for _, bad := range []struct{ path, body string }{
			{"/flash_serve/purge", `{"path": "relative/x"}`},
			{"/flash_serve/purge", `{"path": "/a", "prefix": "/b"}`},
			{"/flash_serve/purge", `{"pth": "/a"}`},
			{"/flash_serve/purge", `not json`},
			{"/flash_serve/prewarm", `{"root": "rel"}`},
			{"/flash_serve/prewarm", `{"root": "/tmp", "budget": "lots"}`},
			{"/flash_serve/prewarm", `{"root": "/tmp", "budget": -1}`},
		} {
			status, b := adminCall(t, "POST", admin+bad.path, bad.body)
			if status != 400 || !strings.Contains(string(b), "error") {
				t.Errorf("%s %s: %d %s, want 400 with an error", bad.path, bad.body, status, b)
			}
		}
		if status, _ := adminCall(t, "GET", admin+"/flash_serve/purge", ""); status != 405 {
			t.Errorf("GET purge: %d, want 405", status)
		}
	})
	step("prewarm", func(t *testing.T) {
		// Prewarm through the API reads the file (and, where residency can be
		// measured, makes an evicted file resident again).
		bigPath := filepath.Join(root, "big.bin")
		c.CloseIdleConnections() // the connections' sockets may hold the file's pages
		prewarmThroughAPI(t, admin, root, bigPath, len(big))
		if d := metricValue(t, scrape(t), "caddy_flash_serve_prewarm_bytes_total"); d < float64(len(big)) {
			t.Errorf("prewarm bytes metric %v after prewarming %d bytes", d, len(big))
		}
	})
}

// checkPrewarmAnswer prewarms big.bin through the admin API and checks the
// answer: one file, read whole.
func checkPrewarmAnswer(t *testing.T, admin, root string, size int) {
	t.Helper()
	status, b := adminCall(t, "POST", admin+"/flash_serve/prewarm", fmt.Sprintf(`{"root": %q, "paths": ["big.bin"], "budget": "64MiB", "wait": true}`, root))
	if status != 200 {
		t.Fatalf("prewarm: %d %s", status, b)
	}
	var pw struct{ Files, Bytes int64 }
	json.Unmarshal(b, &pw)
	if pw.Files != 1 || pw.Bytes < int64(size) {
		t.Errorf("prewarm answered %s; want 1 file of %d bytes", b, size)
	}
}
