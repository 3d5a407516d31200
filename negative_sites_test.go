package flashserve

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/statacc"
)

// negativeHits sums the negative hits of the process's caches.
func negativeHits() int64 {
	var n int64
	caches.Range(func(_, v any) bool {
		n += v.(*sharedCache).Snapshot()[statacc.NegativeHits]
		return true
	})
	return n
}

// TestCreatedFileAfterCached404IsServedAtEverySite: two sites on one root
// share a cache, a third confines its lookups (symlinks beneath, another
// lookup key for the same path). A path asked twice at each is a cached
// 404 (the second answer is a negative hit); once the file is created,
// each site serves it, twice, as soon as the cache hears of it: inotify
// here, since revalidate is an hour.
func TestCreatedFileAfterCached404IsServedAtEverySite(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "here.txt"), []byte("here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := []int{freePort(t), freePort(t), freePort(t)}
	loadSites(t, "",
		siteBlock(ports[0], root, flashServe("revalidate 1h"))+
			siteBlock(ports[1], root, flashServe("revalidate 1h"))+
			siteBlock(ports[2], root, flashServe("revalidate 1h", "symlinks beneath")))
	shared := 0
	caches.Range(func(_, _ any) bool { shared++; return true })
	if shared != 1 {
		t.Fatalf("%d caches for three sites with the same cache settings, want 1 shared", shared)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	url := func(site int) string { return "http://127.0.0.1:" + strconv.Itoa(ports[site]) + "/late.html" }
	for site := range ports {
		for i := range 2 {
			hits := negativeHits()
			if status, _, _ := get(t, c, url(site)); status != http.StatusNotFound {
				t.Fatalf("site %d, request %d: %d before the file exists, want 404", site, i, status)
			}
			if i == 1 && negativeHits() == hits {
				t.Errorf("site %d: the second 404 was not a negative hit", site)
			}
		}
	}
	created := time.Now()
	if err := os.WriteFile(filepath.Join(root, "late.html"), []byte("late\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The first 200 comes once the event is read (microseconds to
	// milliseconds); every request after it must be one.
	for {
		status, _, body := get(t, c, url(0))
		if status == http.StatusOK {
			if string(body) != "late\n" {
				t.Fatalf("body %q", body)
			}
			break
		}
		if time.Since(created) > 5*time.Second {
			t.Fatalf("still %d 5 s after the file was created", status)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("served %v after its creation", time.Since(created))
	for site := range ports {
		for i := range 2 {
			if status, _, body := get(t, c, url(site)); status != http.StatusOK || string(body) != "late\n" {
				t.Errorf("site %d, request %d after the file was served: %d %q", site, i, status, body)
			}
		}
	}
}
