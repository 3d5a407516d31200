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
