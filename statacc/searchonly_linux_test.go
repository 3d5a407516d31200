//go:build linux && !flashserve_portable

package statacc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMissingNameInSearchOnlyDirectoryIsRevalidated: a directory the
// server may search but not read (inotify refuses to watch it, as home
// directories of mode 0711 are to anyone but their owner) sends no event
// when a name is made in it, so a missing path below such a name is
// looked up again within a second, as any path whose directory is not
// watched, and not kept for revalidate as if a watch would tell: a site
// made in ~user after a first request for it is served within a second.
func TestMissingNameInSearchOnlyDirectoryIsRevalidated(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any directory, so inotify never refuses one; CI runs this test as nobody too")
	}
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	// Search and write, no read: inotify_add_watch answers EACCES.
	mustChmod(t, home, 0o311)
	t.Cleanup(func() { os.Chmod(home, 0o755) })
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	for _, rel := range []string{"site/f.html", "site/deeper/f.html"} {
		p := filepath.Join(home, rel)
		for range 2 { // the second answer is the cached one
			if got := describe(t, c, p); got != "missing" {
				t.Fatalf("%s before it is made: %q", rel, got)
			}
		}
	}
	if n := c.counts[UnwatchedDirs].Load(); n != 0 {
		t.Logf("%d directories counted unwatched", n)
	}
	for _, rel := range []string{"site/f.html", "site/deeper/f.html"} {
		write(t, filepath.Join(home, rel), "new")
	}
	for _, rel := range []string{"site/f.html", "site/deeper/f.html"} {
		took := within(t, 3*time.Second, c, filepath.Join(home, rel), "3:new")
		t.Logf("%s served %v after it was made", rel, took)
	}
}
