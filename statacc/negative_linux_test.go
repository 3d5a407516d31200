//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNegativeCacheFullCreatedFileIsSeen: a file created where an
// admitted negative entry of a full cache says nothing is, is served as
// soon as inotify tells, as in a cache with room.
func TestNegativeCacheFullCreatedFileIsSeen(t *testing.T) {
	delays := newChangeDelays(t)
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	admitted := filepath.Join(root, "created.txt")
	lookMissing(t, c, kept[:1]) // hit: it stays when the admission makes room
	lookMissing(t, c, []string{admitted, admitted})
	for _, p := range []string{admitted, kept[0]} {
		if got := negativeHitsOf(t, c, []string{p}); got != 1 {
			t.Fatalf("%s: not a negative hit before its file is created", p)
		}
		changed := time.Now()
		write(t, p, "new")
		took := delays.seen(t, c, changed, p, "3:new")
		t.Logf("%s seen after %v", filepath.Base(p), took)
	}
}

// TestExistingFileMissWhenFullIsWatched: while the negative cache is
// full, a file that exists is opened once by its first lookup and its
// entry answers the next lookups without an open: at once in a directory
// the watcher knows (the lookup entered it before the open, so the entry
// is as fresh as inotify tells); in a directory it did not know (opened
// by the probe, before the watch) within the second its entry is fresh
// for, and after that one lookup opens it again, watched, and the next
// ones are hits.
//
// Both files are written before the cache is made, so that no inotify
// event of the test's own writes reaches it: the watcher reads events
// when it is scheduled, and the write's events (IN_CREATE, IN_MODIFY,
// IN_CLOSE_WRITE on page.html, IN_CREATE on new-dir) could land between a
// lookup's enter and its publish (the entry is published stale, and
// counted as no invalidation), after it (the entry is dropped, its
// invalidation counted only after it left the map), or during the next
// directory's lookups (new-dir's node is dropped with its entry). Each is
// the cache's right answer to a change it cannot date; none is what this
// test is about. Nothing changes on disk once the cache exists, so every
// open and every invalidation here is the cache's own.
func TestExistingFileMissWhenFullIsWatched(t *testing.T) {
	root := t.TempDir()
	dirs := []string{root, filepath.Join(root, "new-dir")}
	for _, dir := range dirs {
		write(t, filepath.Join(dir, "page.html"), "hello")
	}
	c, _ := fullNegativeCache(t, root, 100)
	inv0 := c.counts[Invalidations].Load()
	for _, dir := range dirs {
		if n := lookupOpens(t, c, dir); n != 1 {
			t.Errorf("%s: the first lookup opened the file %d times, want 1", dir, n)
		}
		p := filepath.Join(dir, "page.html")
		oc := countOpens(t, dir)
		v := c.entries.Load(p)
		if v == nil {
			t.Fatalf("%s: no entry after its lookup", dir)
		}
		if !v.watched {
			// The next lookup comes within the entry's second, however
			// loaded the machine.
			v.checked.Store(nanotime())
		}
		hits := c.counts[Hits].Load()
		describe(t, c, p)
		if n := oc.opens(t, "page.html"); n != 0 || c.counts[Hits].Load() != hits+1 {
			t.Errorf("%s: the second lookup opened the file %d times (%d hits), want a hit", dir, n, c.counts[Hits].Load()-hits)
		}
		e := c.entries.Load(p)
		if e == nil {
			t.Fatalf("%s: no entry after its second lookup", dir)
		}
		if want := dir == root; e.watched != want {
			t.Errorf("%s: entry watched %v, want %v (a watched directory's lookup enters it before the open, the probe after)", dir, e.watched, want)
		}
		if !e.watched {
			// Opened before its directory was watched: looked up again
			// after a second, then watched.
			e.checked.Store(nanotime() - int64(2*time.Second))
			describe(t, c, p)
			describe(t, c, p)
			if n := oc.opens(t, "page.html"); n != 1 {
				t.Errorf("%s: %d opens for two lookups after the probe's entry expired, want 1", dir, n)
			}
			if v := c.entries.Load(p); v == nil || !v.watched {
				t.Errorf("%s: the entry looked up again is not cached and watched", dir)
			}
		}
	}
	if n := c.counts[Invalidations].Load() - inv0; n != 0 {
		t.Errorf("%d invalidations, though nothing changed on disk since the cache was made", n)
	}
}

// TestMissedNameMadeJustBeforeIsServed: a name looked up twice while
// missing (so that its negative entry is kept), then made, is served by
// the next lookup, made right after the file is closed, as a client
// polling for a file (a thumbnail being rendered) would ask: its event is
// queued before the close returns, and the lookup handles it before it
// trusts the negative entry.
func TestMissedNameMadeJustBeforeIsServed(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := t.TempDir()
	missed := 0
	for i := range 300 {
		p := filepath.Join(site, fmt.Sprintf("d%d", i%5), fmt.Sprintf("made-%03d.html", i))
		if i%5 == i {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if got := describe(t, c, p); got != "missing" {
				t.Fatalf("%s before it is made: %q", p, got)
			}
		}
		write(t, p, "new")
		if got := describe(t, c, p); got != "3:new" {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("%d of 300 files looked up missing, then made, were not found by the lookup right after", missed)
	}
}
