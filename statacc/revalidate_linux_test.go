//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// negativeEntry returns the cached negative entry of path, failing the
// test if there is none.
func negativeEntry(t *testing.T, c *Cache, path string) *negSlot {
	t.Helper()
	sl := c.negativeSlot(path)
	if sl == nil {
		if c.entries.Load(path) != nil {
			t.Fatalf("%s: a positive entry, want a negative one", path)
		}
		t.Fatalf("%s: no entry", path)
	}
	return sl
}

// missingIn makes a cache with opts, closed when t ends, and looks up a
// missing name in a new directory: the cache, the path and its negative
// entry.
func missingIn(t *testing.T, opts Options, name string) (*Cache, string, *negSlot) {
	t.Helper()
	c := New(opts)
	t.Cleanup(func() { c.Close() })
	p := filepath.Join(t.TempDir(), name)
	lookMissing(t, c, []string{p})
	return c, p, negativeEntry(t, c, p)
}

// wantCount fails the test unless a counter moved by want; msg formats
// the count found.
func wantCount(t *testing.T, got, want int64, msg string) {
	t.Helper()
	if got != want {
		t.Errorf(msg, got)
	}
}

// TestStaleNegativeIsRevalidatedInPlace: a negative entry of a watched
// directory that is no longer fresh is looked up again by its next
// request in place: no miss, the same entry, fresh again, so the one
// after is a plain negative hit. A bench's 404 storm otherwise misses on
// every one of its paths at once, Revalidate after its first pass.
func TestStaleNegativeIsRevalidatedInPlace(t *testing.T) {
	c, p, e := missingIn(t, Options{Workers: 2, Revalidate: time.Hour}, "missing.bin")
	if !e.watched() {
		t.Fatalf("%s: the negative entry of a temporary directory is not watched", p)
	}
	e.checked.Store(nanotime() - int64(time.Hour) - int64(time.Second))
	if c.freshNegative(e) {
		t.Fatal("an entry checked more than Revalidate ago is fresh")
	}
	misses, hits := c.counts[Misses].Load(), c.counts[NegativeHits].Load()
	lookMissing(t, c, []string{p})
	wantCount(t, c.counts[Misses].Load()-misses, 0, "the stale negative entry's lookup made %d misses, want 0 (revalidated in place)")
	wantCount(t, c.counts[negativeRevalidations].Load(), 1, "%d revalidations in place, want 1")
	if now := negativeEntry(t, c, p); now != e {
		t.Error("the revalidated path has a new entry, want the same one kept")
	}
	if !c.freshNegative(e) {
		t.Error("the revalidated entry is not fresh")
	}
	lookMissing(t, c, []string{p})
	wantCount(t, c.counts[negativeRevalidations].Load(), 1, "the lookup after the revalidation revalidated again (%d in all), want a plain hit")
	wantCount(t, c.counts[NegativeHits].Load()-hits, 2, "%d negative hits for the two lookups, want 2")
}

// TestRevalidationFindsAFileItsEventDidNotReport: the revalidation is a
// lookup, not a clock reset. A stale negative entry for a path that
// exists (standing for an inotify event that never came: the entry is put
// back after the creation's event dropped the first one) is not kept: its
// lookup finds the file.
func TestRevalidationFindsAFileItsEventDidNotReport(t *testing.T) {
	c, p, e := missingIn(t, Options{Workers: 2, Revalidate: time.Hour}, "late.bin")
	write(t, p, "here")
	for deadline := time.Now().Add(10 * time.Second); !e.gone(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the creation's inotify event did not drop the negative entry within 10s")
		}
	}
	// Put back as an unindexed entry, as record would without its event.
	h := c.negatives.hash(p)
	sh, shard := c.negatives.shardOf(h)
	sh.mu.Lock()
	ref, _, _ := c.negatives.insertLocked(sh, shard, h, negNew{path: p, kind: negNotExist, watched: true, checked: nanotime() - int64(time.Hour) - int64(time.Second), mark: -1})
	sh.mu.Unlock()
	ringAdd(&c.negs, negOps{c}, ref, c.opts.NegativeEntries)
	misses := c.counts[Misses].Load()
	if got := describe(t, c, p); got != "4:here" {
		t.Fatalf("%s after its stale negative entry was revalidated: %q, want the file", p, got)
	}
	wantCount(t, c.counts[negativeRevalidations].Load(), 0, "%d revalidations kept an entry whose path exists")
	wantCount(t, c.counts[Misses].Load()-misses, 1, "%d misses, want 1: the path is looked up as a miss")
}

// TestUnwatchedStaleNegativeIsAMiss: without inotify an expired negative
// entry is looked up again as a miss, as before (the in-place revalidation
// is for watched directories only).
func TestUnwatchedStaleNegativeIsAMiss(t *testing.T) {
	c, p, e := missingIn(t, Options{Workers: 2, Revalidate: time.Hour, NoInotify: true}, "missing.bin")
	if e.watched() {
		t.Fatal("an entry of a cache without inotify is watched")
	}
	e.checked.Store(nanotime() - int64(2*time.Second))
	misses := c.counts[Misses].Load()
	lookMissing(t, c, []string{p})
	wantCount(t, c.counts[Misses].Load()-misses, 1, "%d misses for the expired unwatched entry, want 1")
	wantCount(t, c.counts[negativeRevalidations].Load(), 0, "%d revalidations in place of an unwatched entry, want 0")
}

// TestJanitorKeepsStaleNegativesForRevalidation: the janitor leaves a
// watched negative entry that went stale less than another Revalidate
// ago for its next lookup to revalidate, and drops one older than that
// and a stale entry of a file (which holds a descriptor).
func TestJanitorKeepsStaleNegativesForRevalidation(t *testing.T) {
	dir := t.TempDir()
	const reval = time.Minute
	c := New(Options{Workers: 2, Revalidate: reval})
	defer c.Close()
	recent, old := filepath.Join(dir, "recent.bin"), filepath.Join(dir, "old.bin")
	file := filepath.Join(dir, "file.bin")
	write(t, file, "x")
	lookMissing(t, c, []string{recent, old})
	if got := describe(t, c, file); got != "1:x" {
		t.Fatalf("%s: %q", file, got)
	}
	now := nanotime()
	negativeEntry(t, c, recent).checked.Store(now - int64(reval) - int64(reval/2))
	negativeEntry(t, c, old).checked.Store(now - 2*int64(reval) - int64(time.Second))
	c.entries.Load(file).checked.Store(now - int64(reval) - int64(time.Second))
	if n := c.dropStale(); n != 2 {
		t.Errorf("the janitor dropped %d entries, want 2 (the old negative and the file)", n)
	}
	if c.negativeSlot(recent) == nil {
		t.Error("the janitor dropped a negative entry stale for less than another Revalidate")
	}
	for _, p := range []string{old, file} {
		if c.entries.Load(p) != nil || c.negativeSlot(p) != nil {
			t.Errorf("%s: the janitor kept it", filepath.Base(p))
		}
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStaleNegative looks up a missing path whose negative entry is
// no longer fresh, every time: revalidated in place in a watched
// directory, a miss (a new entry) without inotify.
func BenchmarkStaleNegative(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"in_place", Options{Workers: 2, Revalidate: time.Hour}},
		{"miss", Options{Workers: 2, Revalidate: time.Hour, NoInotify: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := New(bc.opts)
			defer c.Close()
			p := filepath.Join(b.TempDir(), "missing.bin")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if sl := c.negativeSlot(p); sl != nil {
					sl.checked.Store(nanotime() - int64(2*time.Hour))
				}
				if _, err := c.Get(ctx, p); !errors.Is(err, fs.ErrNotExist) {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.counts[Misses].Load())/float64(b.N), "misses/op")
		})
	}
}
