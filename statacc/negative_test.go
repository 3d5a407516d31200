package statacc

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// missingPaths names n paths that do not exist in dir.
func missingPaths(dir, prefix string, n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("%s-%05d.bin", prefix, i))
	}
	return paths
}

// lookMissing looks each path up once and fails unless every one is
// missing.
func lookMissing(t *testing.T, c *Cache, paths []string) {
	t.Helper()
	for _, p := range paths {
		if got := describe(t, c, p); got != "missing" {
			t.Fatalf("%s: %q, want missing", p, got)
		}
	}
}

// negativeHitsOf counts the negative hits that looking each path up once
// makes.
func negativeHitsOf(t *testing.T, c *Cache, paths []string) int64 {
	t.Helper()
	before := c.counts[NegativeHits].Load()
	lookMissing(t, c, paths)
	return c.counts[NegativeHits].Load() - before
}

// fullNegativeCache returns a cache whose negative cache of n entries is
// full of the paths it returns, all in dir.
func fullNegativeCache(t *testing.T, dir string, n int) (*Cache, []string) {
	t.Helper()
	// No listing (listAfter -1): the distinct paths in dir are each a
	// negative entry, not answered from dir's listing after eight.
	c := New(Options{Workers: 2, NegativeEntries: n, Revalidate: time.Hour, listAfter: -1})
	t.Cleanup(func() { c.Close() })
	kept := missingPaths(dir, "kept", n)
	lookMissing(t, c, kept)
	if got := c.counts[NegativeEntries].Load(); got != int64(n) {
		t.Fatalf("%d negative entries after %d distinct misses, want %d", got, n, n)
	}
	return c, kept
}

// TestNegativeCacheFullScannerDisplacesNothing: once the negative cache is
// full, paths that miss once each (a scanner) are answered, not kept, evict
// nothing, and do not even enter the watcher (no node for their directory).
func TestNegativeCacheFullScannerDisplacesNothing(t *testing.T) {
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	nodes := c.counts[WatchedDirs].Load()
	scan := missingPaths(filepath.Join(root, "scanned-dir"), "scan", 1000)
	misses := c.counts[Misses].Load()
	lookMissing(t, c, scan)
	if got := c.counts[Misses].Load() - misses; got != int64(len(scan)) {
		t.Errorf("%d misses for %d distinct paths", got, len(scan))
	}
	if got := c.counts[NegativeEntries].Load(); got != 100 {
		t.Errorf("%d negative entries after the scan, want 100", got)
	}
	if got := c.counts[NegativeEvictions].Load(); got != 0 {
		t.Errorf("the scan evicted %d negative entries", got)
	}
	if got := c.counts[WatchedDirs].Load(); got != nodes {
		t.Errorf("the scan made %d watcher nodes (%d before, %d after)", got-nodes, nodes, got)
	}
	if got := negativeHitsOf(t, c, kept); got != int64(len(kept)) {
		t.Errorf("%d of the %d paths cached before the scan are still hits", got, len(kept))
	}
}

// TestNegativeCacheFullRepeatedMissIsKept: once the negative cache is
// full, a path that misses a second time is kept (its third lookup is a
// hit), and room is made for it so that the cache stays within its bound.
func TestNegativeCacheFullRepeatedMissIsKept(t *testing.T) {
	root := t.TempDir()
	c, _ := fullNegativeCache(t, root, 100)
	again := missingPaths(root, "again", 30)
	filler := missingPaths(root, "filler", 1000)
	for _, p := range again {
		// Full again: the room the last admission made is taken, by
		// paths kept on their first miss while there is room.
		for c.counts[NegativeEntries].Load() < 100 {
			lookMissing(t, c, filler[:1])
			filler = filler[1:]
		}
		if got := negativeHitsOf(t, c, []string{p, p}); got != 0 {
			t.Fatalf("%s: %d negative hits in its first two lookups: the first must not be kept", filepath.Base(p), got)
		}
		if got := negativeHitsOf(t, c, []string{p}); got != 1 {
			t.Errorf("%s: its third lookup is not a hit: the second miss must keep it", filepath.Base(p))
		}
	}
	if got := c.counts[NegativeEntries].Load(); got > 100 {
		t.Errorf("%d negative entries, more than the bound of 100", got)
	}
	if got := c.counts[NegativeEvictions].Load(); got < int64(len(again)) {
		t.Errorf("%d evictions to admit %d paths into a full cache", got, len(again))
	}
}

// TestNegativeCacheEvictsTheUnusedFirst: when paths that missed again
// need room in a full negative cache, the entries that keep being hit
// stay and the ones nobody asked for again go.
func TestNegativeCacheEvictsTheUnusedFirst(t *testing.T) {
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	used, unused := kept[:50], kept[50:]
	newer := missingPaths(root, "newer", 40)
	lookMissing(t, c, used)
	for _, p := range newer {
		lookMissing(t, c, []string{p, p}) // the second sight is kept
		if got := negativeHitsOf(t, c, used); got != int64(len(used)) {
			t.Fatalf("after admitting %s: %d of %d entries in use are still hits", p, got, len(used))
		}
	}
	if got := negativeHitsOf(t, c, newer); got != int64(len(newer)) {
		t.Errorf("%d of %d admitted paths are hits", got, len(newer))
	}
	left := negativeHitsOf(t, c, unused)
	t.Logf("of the 50 entries nobody hit, %d are left; %d evictions", left, c.counts[NegativeEvictions].Load())
	if left > 50-int64(len(newer)) {
		t.Errorf("%d of the unused entries are left, want at most %d: the admitted paths must have displaced them", left, 50-len(newer))
	}
}

// TestNegativeCacheStormThatFitsIsAllHits: a storm cycling through more
// distinct missing paths than the old default of 10,000 but fewer than
// the bound is answered from the cache from its second round on.
func TestNegativeCacheStormThatFitsIsAllHits(t *testing.T) {
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	storm := missingPaths(t.TempDir(), "storm", 20000)
	lookMissing(t, c, storm)
	if got := negativeHitsOf(t, c, storm); got != int64(len(storm)) {
		t.Errorf("second round: %d of %d lookups were negative hits", got, len(storm))
	}
}

// TestLongMissingPathsStayUnderTheByteBound: 2,000 distinct missing paths
// of 3.4 KB (6.8 MB of paths, fewer than the entries' bound) keep at most
// the bound's bytes of paths, and the heap they leave holds about that
// and no more; once it is reached, the next distinct paths displace
// nothing, and a long path that misses again is still kept (evicting
// others), as when the entries' bound is reached.
func TestLongMissingPathsStayUnderTheByteBound(t *testing.T) {
	const bound = 1 << 20
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 2000})
	t.Cleanup(func() { c.Close() })
	if got := c.opts.negativeBytes; got != bound {
		t.Fatalf("negative bytes bound %d for 2,000 entries, want %d (the least)", got, bound)
	}
	site := t.TempDir()
	deep := func(i int) string {
		return filepath.Join(site, fmt.Sprintf("nx%d", i), strings.Repeat("abcdefgh/", 380)+"f.html")
	}
	heap := heapAfterGC()
	peak := int64(0)
	for i := range 2000 {
		lookMissing(t, c, []string{deep(i)})
		peak = max(peak, c.negatives.bytes.Load())
	}
	grew := heapAfterGC() - heap
	kept := c.counts[NegativeEntries].Load()
	t.Logf("%d of 2,000 paths kept, %d bytes of paths at most, heap %+d bytes", kept, peak, grew)
	if peak > bound {
		t.Errorf("the negative entries held %d bytes of paths, bound %d", peak, bound)
	}
	if kept == 0 || kept >= 2000 {
		t.Errorf("%d of 2,000 long paths kept, want some, as many as fit", kept)
	}
	if grew > 3*bound {
		t.Errorf("the heap grew by %d bytes for %d bytes of paths kept (bound %d)", grew, peak, bound)
	}
	if ev := c.counts[NegativeEvictions].Load(); ev != 0 {
		// Each admission that overfilled the bytes evicted a sixteenth,
		// which made room for the next distinct paths: the store churned.
		t.Errorf("distinct paths, each missing once, evicted %d entries: once full, a new path is to displace nothing", ev)
	}
	again := deep(1999)
	lookMissing(t, c, []string{again, again})
	if got := negativeHitsOf(t, c, []string{again}); got != 1 {
		t.Errorf("a long path that missed twice in a full cache is not kept")
	}
	if got := c.negatives.bytes.Load(); got > bound {
		t.Errorf("%d bytes of paths after an admission, bound %d", got, bound)
	}
}
