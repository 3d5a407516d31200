//go:build linux && !flashserve_portable

package statacc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// appearance is one way a missing path comes to exist: apply makes path
// say want.
type appearance struct {
	name, path, want string
	apply            func()
}

// appearances makes a tree under root (a `current` link to release-1,
// release-2 holding new.html) and the ways a path missing in it appears:
// created, renamed into place, the link swapped to release-2, a parent
// directory made.
func appearances(t *testing.T, root string) []appearance {
	t.Helper()
	write(t, filepath.Join(root, "release-1/keep"), "1")
	write(t, filepath.Join(root, "release-2/new.html"), "two")
	if err := os.Symlink("release-1", filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	return []appearance{
		{"created", filepath.Join(root, "created.txt"), "3:new", func() { write(t, filepath.Join(root, "created.txt"), "new") }},
		{"renamed into place", filepath.Join(root, "renamed.txt"), "4:move", func() {
			write(t, filepath.Join(root, ".tmp-renamed"), "move")
			mustRename(t, filepath.Join(root, ".tmp-renamed"), filepath.Join(root, "renamed.txt"))
		}},
		{"current swapped", filepath.Join(root, "current/new.html"), "3:two", func() { symlinkSwap(t, root, "current", "release-2") }},
		{"parent made", filepath.Join(root, "later/sub/x.txt"), "1:x", func() { write(t, filepath.Join(root, "later/sub/x.txt"), "x") }},
	}
}

// collide gives every path the same hash in c's negative store, so that
// every entry's index word has the same tag and place (one run of the
// probe holds them all) and only the comparison of the whole path tells
// them apart.
func collide(c *Cache) { c.negatives.hash = func(string) uint64 { return 0x5eed } }

// TestNegativeEntriesSeeChangesWithAnyHash: each way a missing path comes
// to exist (created, renamed into place, a `current` link swapped to a
// release that has it, a parent directory made) drops its cached 404
// through inotify, and the file is served by the next lookup and the one
// after it (a hit); a chmod of its parent drops it too (the next lookup
// looks again). Run with the store's hash and with one that gives every
// path the same hash, where the watcher's index and the store must still
// drop the right entry.
func TestNegativeEntriesSeeChangesWithAnyHash(t *testing.T) {
	for _, colliding := range []bool{false, true} {
		name := "maphash"
		if colliding {
			name = "one_hash_for_all"
		}
		t.Run(name, func(t *testing.T) {
			delays := newChangeDelays(t)
			root := t.TempDir()
			c := New(Options{Workers: 2, Revalidate: time.Hour})
			t.Cleanup(func() { c.Close() })
			if colliding {
				collide(c)
			}
			write(t, filepath.Join(root, "locked/keep"), "1")
			steps := appearances(t, root)
			for _, s := range steps {
				lookMissing(t, c, []string{s.path})
				if got := watchedHit(t, c, s.path); got != "missing" {
					t.Fatalf("%s: %q before the change", s.path, got)
				}
				changed := time.Now()
				s.apply()
				took := delays.seen(t, c, changed, s.path, s.want)
				hits := c.counts[Hits].Load()
				got := describe(t, c, s.path)
				if got != s.want || c.counts[Hits].Load() != hits+1 {
					t.Errorf("%s: the lookup after the file was served gave %q (%d hits), want %q from the cache", s.name, got, c.counts[Hits].Load()-hits, s.want)
				}
				t.Logf("%s: served after %v", s.name, took)
			}

			p := filepath.Join(root, "locked", "x.txt")
			lookMissing(t, c, []string{p})
			if got := watchedHit(t, c, p); got != "missing" {
				t.Fatalf("%s: %q", p, got)
			}
			sl := negativeEntry(t, c, p)
			changed := time.Now()
			mustChmod(t, filepath.Join(root, "locked"), 0o700)
			delays.until(t, c, changed, "the negative entry dropped by its parent's chmod", func() bool { return c.negativeSlot(p) == nil })
			if !sl.gone() {
				t.Error("the dropped negative entry's slot is not marked gone")
			}
			misses := c.counts[Misses].Load()
			lookMissing(t, c, []string{p})
			wantCount(t, c.counts[Misses].Load()-misses, 1, "%d misses for the lookup after the chmod, want 1")
		})
	}
}

// TestNegativeHashCollisionNeverAnswersForAnotherPath: with every path
// given the same hash, a cached 404 never answers for another path, and a
// path that exists is never answered 404: each lookup compares the whole
// path (and root and mode). Colliding entries are each kept and each
// answer for their own path; a lookup under another root or mode replaces
// the path's entry.
func TestNegativeHashCollisionNeverAnswersForAnotherPath(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	collide(c)
	a, b, d := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"), filepath.Join(dir, "d.txt")
	write(t, b, "bee")
	lookMissing(t, c, []string{a, a})
	wantCount(t, c.counts[NegativeHits].Load(), 1, "%d negative hits for the second lookup of a cached 404, want 1")
	for range 2 {
		if got := describe(t, c, b); got != "3:bee" {
			t.Fatalf("%s exists and collides with a cached 404: %q", b, got)
		}
	}
	lookMissing(t, c, []string{d})
	if c.negativeSlot(a) == nil || c.negativeSlot(d) == nil {
		t.Fatal("a colliding 404 took the place of another")
	}
	misses, negHits := c.counts[Misses].Load(), c.counts[NegativeHits].Load()
	lookMissing(t, c, []string{a, d})
	wantCount(t, c.counts[Misses].Load()-misses, 0, "%d misses for two colliding cached 404s, want 0")
	wantCount(t, c.counts[NegativeHits].Load()-negHits, 2, "%d negative hits for two colliding cached 404s, want 2")
	// Under another root and mode the same path is another lookup.
	if _, err := c.getConfined(t.Context(), dir, SymlinksBeneath, a); err == nil {
		t.Fatal("the missing path was found under a root")
	}
	if sl := negativeEntry(t, c, a); sl.symlinks != SymlinksBeneath || !c.negatives.rootIs(c.negatives.shardOfPath(a), sl, dir) {
		t.Errorf("the confined lookup's entry has mode %v, root %q, want %s", sl.symlinks, c.negatives.prefixOf(sl).root, dir)
	}
	misses = c.counts[Misses].Load()
	lookMissing(t, c, []string{a})
	wantCount(t, c.counts[Misses].Load()-misses, 1, "an unconfined lookup was answered by a confined entry (%d misses, want 1)")
	// A file written where the last colliding 404 was is served.
	write(t, a, "ay")
	t.Logf("the file written where the 404 was served after %v", within(t, eachDelayBound, c, a, "2:ay"))
	if n := c.counts[NegativeEntries].Load(); n != 1 || c.negativeSlot(d) == nil {
		t.Errorf("%d negative entries counted, want 1: %s's, which the write of its colliding %s left", n, d, a)
	}
}
