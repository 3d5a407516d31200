package flashserve

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestCachedRefusalSaysWhatTheFirstSaid: with symlinks deny, a request
// for a symbolic link is a 403 whose error message ({err.message} in
// handle_errors, and the error log) names the refused path; the same
// request answered from the negative cache must say the same thing, not
// a message of its own. Each answer is compared with the first.
func TestCachedRefusalSaysWhatTheFirstSaid(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "target.html"), []byte("t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.html", filepath.Join(root, "link.html")); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe("revalidate 1h", "symlinks deny"),
		block("handle_errors", `respond "{err.status_code} {err.message}" {err.status_code}`)))
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/link.html"
	status, _, first := get(t, c, url)
	if status != http.StatusForbidden {
		t.Fatalf("first request: %d %q, want 403", status, first)
	}
	t.Logf("first answer: %q", first)
	for i := 1; i < 4; i++ {
		status, _, body := get(t, c, url)
		if status != http.StatusForbidden || string(body) != string(first) {
			t.Errorf("request %d: %d %q, the first said 403 %q", i+1, status, body, first)
		}
	}
}

// TestCached404SaysWhatFileServerSays: handle_errors answering with the
// error's placeholders gives, for a missing path, file_server's answer on
// the first request and on the ones the negative cache answers, and for a
// path below a file (ENOTDIR).
func TestCached404SaysWhatFileServerSays(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "file.txt"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	handler := block("handle_errors", `respond "{err.status_code} [{err.status_text}] [{err.message}]" {err.status_code}`)
	fp, ap := freePort(t), freePort(t)
	loadSites(t, "", siteBlock(fp, root, flashServe("revalidate 1h"), handler)+siteBlock(ap, root, "file_server", handler))
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	for _, p := range []string{"/missing.html", "/file.txt/x"} {
		status, _, want := get(t, c, "http://127.0.0.1:"+strconv.Itoa(ap)+p)
		t.Logf("%s: file_server %d %q", p, status, want)
		for i := range 3 {
			got, _, body := get(t, c, "http://127.0.0.1:"+strconv.Itoa(fp)+p)
			if got != status || string(body) != string(want) {
				t.Errorf("%s, request %d: flash_serve %d %q, file_server %d %q", p, i+1, got, body, status, want)
			}
		}
	}
}

// TestNegativesAcrossAReload: a cached 404 stays a negative hit across a
// reload of the same config (the cache is shared through the reload),
// and a file created after the reload is served as soon as inotify
// tells (revalidate an hour), twice.
func TestNegativesAcrossAReload(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "here.txt"), []byte("here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	site := siteBlock(port, root, flashServe("revalidate 1h"))
	loadSites(t, "", site)
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/late.html"
	for range 2 {
		if status, _, _ := get(t, c, url); status != http.StatusNotFound {
			t.Fatalf("%d before the file exists", status)
		}
	}
	loadSites(t, "", site) // the reload
	c.CloseIdleConnections()
	hits := negativeHits()
	if status, _, _ := getAfterReload(t, c, url); status != http.StatusNotFound || negativeHits() != hits+1 {
		t.Errorf("after the reload: %d, %d negative hits, want a cached 404", status, negativeHits()-hits)
	}
	if err := os.WriteFile(filepath.Join(root, ".late"), []byte("late\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, ".late"), filepath.Join(root, "late.html")); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	for {
		status, _, _ := get(t, c, url)
		if status == http.StatusOK {
			break
		}
		if time.Since(created) > 5*time.Second {
			t.Fatalf("still %d 5 s after the file was created", status)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("served %v after its creation", time.Since(created))
	if status, _, body := get(t, c, url); status != http.StatusOK || string(body) != "late\n" {
		t.Errorf("after it was served: %d %q", status, body)
	}
}
