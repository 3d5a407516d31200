//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSymlinkSwapsUnderLookupsNotLost: a `current` link swapped 100 times
// while four goroutines look up a file through it: once the swaps stop,
// the last release is served within a second (revalidate is an hour, so
// an event lost in a race between a lookup and a watch would leave the
// old one), and once the entries go, no node or watch is left.
func TestSymlinkSwapsUnderLookupsNotLost(t *testing.T) {
	dir := t.TempDir()
	const releases = 4
	for i := range releases {
		write(t, filepath.Join(dir, "r"+strconv.Itoa(i), "sub", "f"), "release-"+strconv.Itoa(i))
	}
	os.Symlink("r0", filepath.Join(dir, "current"))
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	path := filepath.Join(dir, "current", "sub", "f")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				describe(t, c, path)
			}
		}()
	}
	last := 0
	for i := 1; i <= 100; i++ {
		last = i % releases
		symlinkSwap(t, dir, "current", "r"+strconv.Itoa(last))
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	stop.Store(true)
	wg.Wait()
	want := fmt.Sprintf("%d:release-%d", len("release-0"), last)
	took := within(t, time.Second, c, path, want)
	t.Logf("last release served %v after the swaps stopped; %d nodes, %d watches", took, c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()))
	// It stays right: a watched hit, and a change in the new target is seen.
	watchedHit(t, c, path)
	write(t, filepath.Join(dir, "r"+strconv.Itoa(last), "sub", "f"), "changed")
	within(t, time.Second, c, path, "7:changed")
	c.flush()
	if n, w := c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()); n != 0 || w != 0 {
		t.Fatalf("%d nodes and %d watches left after every entry went", n, w)
	}
}

// TestMissingDirectoriesBounded: a crawler asking for files below
// directories that do not exist (/base/<random>/x/f) cannot make the cache
// hold more nodes or watches than max_watches, and every answer is right.
func TestMissingDirectoriesBounded(t *testing.T) {
	const limit = 32
	c := New(Options{Workers: 2, Revalidate: time.Hour, MaxWatches: limit})
	defer c.Close()
	base := t.TempDir()
	write(t, filepath.Join(base, "real", "f"), "real")
	peakNodes, peakWatches := 0, 0
	for i := range 3000 {
		p := filepath.Join(base, "n"+strconv.Itoa(i), "x", "f")
		if got := describe(t, c, p); got != "missing" {
			t.Fatalf("%s: %q", p, got)
		}
		peakNodes = max(peakNodes, int(c.counts[WatchedDirs].Load()))
		if i%50 == 0 {
			peakWatches = max(peakWatches, inotifyWatches(t, c.watch.watchFD()))
		}
	}
	t.Logf("peak %d nodes, %d watches; %d evictions, %d refused", peakNodes, peakWatches, c.counts[watchEvictions].Load(), c.counts[WatchRefused].Load())
	if peakNodes > limit || peakWatches > limit {
		t.Fatalf("peak %d nodes, %d watches, bound %d", peakNodes, peakWatches, limit)
	}
	// A directory created after its negative lookup is seen.
	p := filepath.Join(base, "n2999", "x", "f")
	write(t, p, "now")
	within(t, time.Second, c, p, "3:now")
	c.flush()
	if n, w := c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()); n != 0 || w != 0 {
		t.Fatalf("%d nodes and %d watches left after every entry went", n, w)
	}
}

// TestQueueOverflowStartsOver: after the kernel says events were lost
// (IN_Q_OVERFLOW, handed to the watcher as the read loop would), nothing
// cached is trusted, every node and watch goes, and the paths looked up
// again are watched again: a later change is seen through inotify.
func TestQueueOverflowStartsOver(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	base := t.TempDir()
	var paths []string
	for i := range 5 {
		p := filepath.Join(base, "d"+strconv.Itoa(i), "f")
		write(t, p, "one")
		watchedHit(t, c, p)
		paths = append(paths, p)
	}
	c.watch.handle(-1, unix.IN_Q_OVERFLOW, "")
	if n, w, l := c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()), c.entryCount(); n != 0 || w != 0 || l != 0 {
		t.Fatalf("after an overflow: %d nodes, %d watches, %d entries", n, w, l)
	}
	for _, p := range paths {
		watchedHit(t, c, p)
	}
	write(t, paths[3], "second")
	took := within(t, time.Second, c, paths[3], "6:second")
	t.Logf("change after the overflow seen in %v", took)
}

// TestFileChmodReopens: a chmod or chown of a cached file (IN_ATTRIB on
// its name) drops the entry, so the next lookup opens it again and
// decides again what it may trust about it (pagecache.Trusted is asked at
// open): the mode the cache reports changes within a second, with
// revalidate at an hour.
func TestFileChmodReopens(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	p := filepath.Join(t.TempDir(), "d", "f")
	write(t, p, "one")
	watchedHit(t, c, p)
	mode := func() os.FileMode {
		e, err := c.Get(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Release()
		return e.fileMode.Perm()
	}
	if m := mode(); m != 0o644 {
		t.Fatalf("mode %v before", m)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for mode() != 0o600 {
		if time.Since(start) > time.Second {
			t.Fatal("a chmod of the file was not seen within 1 s")
		}
		time.Sleep(time.Millisecond)
	}
	if os.Geteuid() == 0 {
		misses := c.counts[Misses].Load()
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		for c.counts[Misses].Load() == misses {
			mode()
			if time.Since(start) > time.Second {
				t.Fatal("a chown of the file was not seen within 1 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("seen after %v", time.Since(start))
}

// TestSharedWatchOutlivesOneOfItsPaths: one directory reached by two
// paths (its own and through a link) has one inotify watch for both
// nodes; when the entries of one path go, the watch stays for the other,
// whose entries still see a change.
func TestSharedWatchOutlivesOneOfItsPaths(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	base := t.TempDir()
	real := filepath.Join(base, "real", "d", "f")
	write(t, real, "one")
	os.Symlink("real", filepath.Join(base, "link"))
	viaLink := filepath.Join(base, "link", "d", "f")
	watchedHit(t, c, real)
	watchedHit(t, c, viaLink)
	for _, gone := range []string{viaLink, real} {
		kept := real
		if gone == real {
			kept = viaLink
			watchedHit(t, c, viaLink)
		}
		c.Purge(gone, false)
		watchedHit(t, c, kept)
		write(t, real, "changed-"+filepath.Base(filepath.Dir(filepath.Dir(gone))))
		want := fmt.Sprintf("%d:changed-%s", len("changed-")+len(filepath.Base(filepath.Dir(filepath.Dir(gone)))), filepath.Base(filepath.Dir(filepath.Dir(gone))))
		took := within(t, time.Second, c, kept, want)
		t.Logf("%s forgotten: a change seen through %s after %v", gone, kept, took)
		watchedHit(t, c, real)
		watchedHit(t, c, viaLink)
	}
	c.flush()
	if n, w := c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()); n != 0 || w != 0 {
		t.Fatalf("%d nodes and %d watches left", n, w)
	}
}

// TestLinkPastTheWatchBound: a path through a link whose nodes and its
// target's do not fit in max_watches is served right, unwatched (fresh
// for a second), with no lookup stuck; a swap of the link is then seen
// through the one-second fallback, and nothing is left once it goes.
func TestLinkPastTheWatchBound(t *testing.T) {
	base := t.TempDir()
	deep := filepath.Join(base, "a", "b", "c", "d", "e", "f", "g", "h")
	write(t, filepath.Join(deep, "r1", "x", "f"), "one")
	write(t, filepath.Join(deep, "r2", "x", "f"), "two")
	os.Symlink(filepath.Join(deep, "r1"), filepath.Join(base, "current"))
	limit := len(strings.Split(strings.Trim(base, "/"), "/")) + 4 // room for the link's path, not its target's
	c := New(Options{Workers: 2, Revalidate: time.Hour, MaxWatches: limit})
	defer c.Close()
	path := filepath.Join(base, "current", "x", "f")
	done := make(chan string, 1)
	go func() { done <- describe(t, c, path) }()
	select {
	case got := <-done:
		if got != "3:one" {
			t.Fatalf("%q, want 3:one", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lookup past the watch bound is stuck")
	}
	v := c.entries.Load(path)
	t.Logf("bound %d: %d nodes, entry watched %v, %d refused", limit, c.counts[WatchedDirs].Load(), v.watched, c.counts[WatchRefused].Load())
	if c.counts[WatchedDirs].Load() > int64(limit) {
		t.Fatalf("%d nodes past the bound %d", c.counts[WatchedDirs].Load(), limit)
	}
	symlinkSwap(t, base, "current", filepath.Join(deep, "r2"))
	within(t, 3*time.Second, c, path, "3:two")
	c.flush()
	if n, w := c.counts[WatchedDirs].Load(), inotifyWatches(t, c.watch.watchFD()); n != 0 || w != 0 {
		t.Fatalf("%d nodes and %d watches left", n, w)
	}
}

// watchFD is the inotify descriptor, for tests that count its watches.
func (w *watcher) watchFD() int {
	if w == nil {
		return -1
	}
	return w.fd
}
