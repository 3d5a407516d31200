package flashserve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flashserve/caddy-flash-serve/internal/hotset"
	"github.com/flashserve/caddy-flash-serve/prewarm"
	"github.com/flashserve/caddy-flash-serve/statacc"
)

// provisionHotSetSite provisions a handler that warms only its hot set (a
// pattern that matches nothing), for the hot-set identity tests.
func provisionHotSetSite(t *testing.T, root string, statWorkers int) *FlashServe {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	fsrv := &FlashServe{Root: root, Prewarm: []string{"none-*"}, StatWorkers: statWorkers}
	if err := fsrv.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return fsrv
}

func hitHotSetSite(t *testing.T, fsrv *FlashServe, p string, n int) {
	t.Helper()
	for range n {
		e, err := fsrv.cache.GetCounted(context.Background(), nil, "", statacc.SymlinksFollow, p)
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
	}
}

// hotTargetsOf is what a handler's warm-up would read as its hot set now.
func hotTargetsOf(t *testing.T, fsrv *FlashServe) map[string]bool {
	t.Helper()
	ts, err := prewarm.HotTargets(fsrv.shared.hot.Path())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, tg := range ts {
		got[tg.Path] = true
	}
	return got
}

// TestHotSetOfTwoCachesWithOneRoot: two sites serve one root with other
// tuning (stat_workers 2 and 3), so they have two caches, two counters
// and two savers, each with its own file (named by the cache's key):
// neither save replaces the other's. After a restart each site must still
// find the files its clients asked for. (bccf6b4 named both files by the
// root, and the last save won.)
func TestHotSetOfTwoCachesWithOneRoot(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a.bin"), filepath.Join(root, "b.bin")
	os.WriteFile(a, []byte("a"), 0o644)
	os.WriteFile(b, []byte("b"), 0o644)
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	siteA, siteB := provisionHotSetSite(t, root, 2), provisionHotSetSite(t, root, 3)
	if siteA.shared == siteB.shared {
		t.Fatal("the two tunings share a cache: the test would prove nothing")
	}
	hitHotSetSite(t, siteA, a, 5)
	hitHotSetSite(t, siteB, b, 5)
	// Caddy stops: each cache's last user goes and its saver saves.
	if err := siteA.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := siteB.Cleanup(); err != nil {
		t.Fatal(err)
	}
	hs, err := hotset.Load(siteA.shared.hot.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("site A's saver wrote %s holding %+v (site B's: %s)", filepath.Base(siteA.shared.hot.Path()), hs.Files, filepath.Base(siteB.shared.hot.Path()))
	// The restart: site A (stat_workers 2) warms what its file says.
	again := provisionHotSetSite(t, root, 2)
	defer again.Cleanup()
	got := hotTargetsOf(t, again)
	if !got[a] {
		t.Errorf("after the restart site A's hot set is %v: a.bin, the only file its clients asked for (5 times), is lost", got)
	}
}

// TestHotSetOfASharedCacheFollowsItsSite: sites with other roots and the
// same tuning share one cache and one saver, whose file is named by the
// cache's key, which all these sites share: a restart where another site
// comes first (sites reordered, a site removed, or two servers, which
// Caddy provisions in map order) finds the hot set under the same name.
// (bccf6b4 named it by the root of the site provisioned first.)
func TestHotSetOfASharedCacheFollowsItsSite(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	b := filepath.Join(rootB, "b.bin")
	os.WriteFile(b, []byte("b"), 0o644)
	for _, restart := range []string{"site A removed", "sites in the other order"} {
		t.Run(restart, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", t.TempDir())
			siteA, siteB := provisionHotSetSite(t, rootA, 2), provisionHotSetSite(t, rootB, 2)
			if siteA.shared != siteB.shared {
				t.Fatal("the sites do not share a cache: the test would prove nothing")
			}
			hitHotSetSite(t, siteB, b, 5) // only site B's clients came
			siteA.Cleanup()
			siteB.Cleanup() // the last user: the hot set is saved
			var next *FlashServe
			switch restart {
			case "site A removed":
				next = provisionHotSetSite(t, rootB, 2)
				defer next.Cleanup()
			default:
				next = provisionHotSetSite(t, rootB, 2)
				defer next.Cleanup()
				other := provisionHotSetSite(t, rootA, 2)
				defer other.Cleanup()
			}
			if got := hotTargetsOf(t, next); !got[b] {
				t.Errorf("after the restart (%s) site B's warm-up reads the hot set %s: %v; b.bin, asked for 5 times before, is not in it (saved as %s)",
					restart, filepath.Base(next.shared.hot.Path()), got, filepath.Base(siteA.shared.hot.Path()))
			}
		})
	}
}

// TestWarmUpSeesRequestsInFlight: a warm-up reads one batch at a time
// "while requests are served" (Warmer.Busy = sent.serving). A download in
// progress (a large file to a slow client, for minutes) and a stream of
// 304s to revalidating clients are requests served: were a response
// counted only after its body, and only when it has one, the warm-up
// would run all its workers × 16 reads in flight beside them.
func TestWarmUpSeesRequestsInFlight(t *testing.T) {
	root := t.TempDir()
	big := filepath.Join(root, "big.bin")
	if err := os.WriteFile(big, make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "small.txt"), []byte("small"), 0o644)
	port := freePort(t)
	loadSites(t, "", siteBlock(port, root, flashServe()))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	status, hdr, _ := get(t, c, base+"/small.txt")
	if status != 200 || hdr.Get("Etag") == "" {
		t.Fatalf("small.txt: %d, etag %q", status, hdr.Get("Etag"))
	}
	etag := hdr.Get("Etag")
	idle := func() {
		waitFor(t, "no response for a window", 10*time.Second, func() bool { return !sent.serving() })
	}
	// busyShare samples serving for d while the load runs.
	busyShare := func(d time.Duration, load func()) (busy, all int) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			load()
			if sent.serving() {
				busy++
			}
			all++
			time.Sleep(5 * time.Millisecond)
		}
		return busy, all
	}
	t.Run("revalidations", func(t *testing.T) {
		idle()
		n := 0
		busy, all := busyShare(time.Second, func() {
			req, _ := http.NewRequest("GET", base+"/small.txt", nil)
			req.Header.Set("If-None-Match", etag)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotModified {
				t.Fatalf("revalidation: %d", resp.StatusCode)
			}
			n++
		})
		t.Logf("%d 304 responses in 1 s: busy in %d of %d samples", n, busy, all)
		if busy < all/2 {
			t.Errorf("%d requests answered 304 in 1 s, and the warm-up saw requests in %d of %d samples", n, busy, all)
		}
	})
	t.Run("a download in progress", func(t *testing.T) {
		idle()
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		first := make([]byte, 1024)
		if _, err := io.ReadFull(conn, first); err != nil { // the response has begun
			t.Fatal(err)
		}
		// The client reads no more: the body stays in flight.
		busy, all := busyShare(time.Second, func() {})
		t.Logf("a 64 MiB body in flight to a slow client: busy in %d of %d samples over 1 s", busy, all)
		if busy < all/2 {
			t.Errorf("the warm-up counted a response in progress as no request for %d of %d samples", all-busy, all)
		}
	})
}

// TestHotSetOfRootDirectiveSites: with the usual Caddyfile (`root * DIR`
// and flash_serve without a root) the handler's Root is the placeholder
// {http.vars.root}. Two such sites with other tuning (two caches, two
// savers) must keep two hot sets: served through Caddy, each site's
// requested file is in a saved hot set after the stop. (bccf6b4 named
// both by the placeholder as written, and the last save won.)
func TestHotSetOfRootDirectiveSites(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(rootA, "a.bin"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(rootB, "b.bin"), []byte("b"), 0o644)
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	portA, portB := freePort(t), freePort(t)
	loadSites(t, "", siteBlock(portA, rootA, flashServe("prewarm none-*", "stat_workers 2"))+
		siteBlock(portB, rootB, flashServe("prewarm none-*", "stat_workers 3")))
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for range 5 {
		if s, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/a.bin", portA)); s != 200 {
			t.Fatalf("a.bin: %d", s)
		}
		if s, _, _ := get(t, c, fmt.Sprintf("http://127.0.0.1:%d/b.bin", portB)); s != 200 {
			t.Fatalf("b.bin: %d", s)
		}
	}
	c.CloseIdleConnections()
	if err := caddy.Stop(); err != nil { // the savers save
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(data, "caddy", "flash_serve", "hotset-*.json"))
	saved := map[string]bool{}
	for _, f := range files {
		hs, err := hotset.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hs.Files {
			saved[filepath.Base(e.Path)] = true
		}
	}
	t.Logf("hot-set files after the stop: %d, holding %v", len(files), saved)
	if !saved["a.bin"] || !saved["b.bin"] {
		t.Errorf("two sites (roots %s and %s) asked for a.bin and b.bin 5 times each; the saved hot sets hold %v: one site's set was overwritten by the other's", rootA, rootB, saved)
	}
}
