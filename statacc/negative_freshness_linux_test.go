//go:build linux && !flashserve_portable

package statacc

import (
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestENOTDIRNegativeSeesItsFileBecomeADirectory: root/f/x.txt below a
// regular file f is an ENOTDIR answer, cached (the second lookup is a
// watched hit); f is then removed and made a directory holding x.txt.
// With revalidate an hour, the file must be served as soon as inotify
// tells, as a created file is (eachDelayBound).
func TestENOTDIRNegativeSeesItsFileBecomeADirectory(t *testing.T) {
	for _, colliding := range []bool{false, true} {
		t.Run(map[bool]string{false: "maphash", true: "one_hash_for_all"}[colliding], func(t *testing.T) {
			delays := newChangeDelays(t)
			root := t.TempDir()
			c := New(Options{Workers: 2, Revalidate: time.Hour})
			t.Cleanup(func() { c.Close() })
			if colliding {
				collide(c)
			}
			write(t, filepath.Join(root, "f"), "file")
			p := filepath.Join(root, "f", "x.txt")
			if got := describe(t, c, p); !strings.HasPrefix(got, "error") && got != "missing" {
				t.Fatalf("%s below a file: %q", p, got)
			}
			first := describe(t, c, p)
			if got := watchedHit(t, c, p); got != first {
				t.Fatalf("%s: %q, then %q", p, first, got)
			}
			changed := time.Now()
			if err := os.Remove(filepath.Join(root, "f")); err != nil {
				t.Fatal(err)
			}
			write(t, p, "now")
			took := delays.seen(t, c, changed, p, "3:now")
			t.Logf("served %v after f became a directory", took)
		})
	}
}

// TestRefusalBelowALinkSeesTheLinkReplaced: with symlinks deny (and
// beneath, for a link leaving the root), root/site/dl/page.html below a
// link dl is a refusal, cached (the second lookup is a watched hit); dl
// is then replaced by a directory holding page.html. With revalidate an
// hour the page must be served as soon as inotify tells.
func TestRefusalBelowALinkSeesTheLinkReplaced(t *testing.T) {
	for _, mode := range []Symlinks{SymlinksDeny, SymlinksBeneath} {
		t.Run(mode.String(), func(t *testing.T) {
			delays := newChangeDelays(t)
			root := t.TempDir()
			site := filepath.Join(root, "site")
			c := New(Options{Workers: 2, Revalidate: time.Hour})
			t.Cleanup(func() { c.Close() })
			write(t, filepath.Join(root, "outside/page.html"), "out")
			write(t, filepath.Join(site, "index.html"), "i")
			if err := os.Symlink(filepath.Join(root, "outside"), filepath.Join(site, "dl")); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(site, "dl", "page.html")
			_, err := c.getConfined(t.Context(), site, mode, p)
			if !IsRefused(err) {
				t.Fatalf("%s under %v: %v, want a refusal", p, mode, err)
			}
			hits := c.counts[NegativeHits].Load()
			if _, err := c.getConfined(t.Context(), site, mode, p); !IsRefused(err) || c.counts[NegativeHits].Load() != hits+1 {
				t.Fatalf("second lookup: %v, %d negative hits, want a cached refusal", err, c.counts[NegativeHits].Load()-hits)
			}
			changed := time.Now()
			if err := os.Remove(filepath.Join(site, "dl")); err != nil {
				t.Fatal(err)
			}
			write(t, p, "in")
			flushes := delays.start(t, c)
			for {
				e, err := c.getConfined(t.Context(), site, mode, p)
				if err == nil {
					e.Release()
					break
				}
				if time.Since(changed) > eachDelayBound {
					t.Fatalf("%s: still %v %v after dl became a directory", p, err, eachDelayBound)
				}
				time.Sleep(time.Millisecond)
			}
			took := time.Since(changed)
			delays.done(t, c, flushes, took)
			t.Logf("served %v after dl became a directory", took)
		})
	}
}

// TestNegativeHitsDuringCompactionAndReuse: every path in one shard (a
// hash whose shard bits are the same for all, its low bits distinct), so
// that Purges free slots that new entries reuse at once and the arena is
// compacted over and over, while readers look up missing paths, paths
// that exist, and paths whose names differ from a missing one's only in
// their last byte. A missing path is always missing, an existing one
// always its file, under -race; after the churn the arena holds at most
// four times its live bytes (plus two minimum arenas).
func TestNegativeHitsDuringCompactionAndReuse(t *testing.T) {
	root := t.TempDir()
	c := New(Options{Workers: 4, Revalidate: time.Hour, NegativeEntries: 256})
	t.Cleanup(func() { c.Close() })
	seed := c.negatives.seed
	c.negatives.hash = func(p string) uint64 { return uint64(uint32(maphash.String(seed, p))) }
	long := strings.Repeat("d", 150)
	var present, missing []string
	for i := range 40 {
		p := filepath.Join(root, fmt.Sprintf("%s-%03d-a", long, i))
		write(t, p, "x")
		present = append(present, p)
		missing = append(missing, filepath.Join(root, fmt.Sprintf("%s-%03d-b", long, i)))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	wg.Add(4)
	for r := range 3 {
		go untilStopped(&wg, stop, func(i int) {
			k := (i*7 + r) % len(missing)
			if got := describe(t, c, missing[k]); got != "missing" {
				bad.Add(1)
				t.Errorf("%s: %q, want missing", filepath.Base(missing[k]), got)
			}
			if got := describe(t, c, present[k]); got != "1:x" {
				bad.Add(1)
				t.Errorf("%s: %q, want 1:x", filepath.Base(present[k]), got)
			}
		})
	}
	go func() {
		defer wg.Done()
		defer close(stop)
		for i := range 5000 {
			c.Purge(missing[(i*13)%len(missing)], false)
			// Other missing paths in the same shard: garbage in the arena,
			// slots freed and taken.
			describe(t, c, filepath.Join(root, fmt.Sprintf("%s-churn-%d", long, i%300)))
			if i%50 == 0 {
				c.Purge(root, true)
			}
		}
	}()
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d wrong answers", bad.Load())
	}
	live, capacity := 0, 0
	for k := range c.negatives.shards {
		sh := &c.negatives.shards[k]
		sh.mu.RLock()
		live += sh.liveBytesLocked()
		capacity += cap(sh.arena)
		sh.mu.RUnlock()
	}
	if capacity > 4*live+2*negArenaMin {
		t.Errorf("arena of %d bytes for %d live bytes after the churn", capacity, live)
	}
	t.Logf("%d negative hits, %d misses; arena %d bytes for %d live", c.counts[NegativeHits].Load(), c.counts[Misses].Load(), capacity, live)
}

// TestNegativeArenaHoldsPathsOnceMoreAtMost: the documented bound of the
// arena (negative.go's defaultNegativeEntries: an entry's "path and root
// once more at most while freed arena bytes wait for compaction", the
// 29 MiB worst case of 65,536 entries). Entries churn in one shard, one
// invalidated and one new at a time, the live set steady; after each
// step the shard's arena (its capacity, what it holds in memory) must
// be within twice its live bytes, with one minimum arena of slack.
func TestNegativeArenaHoldsPathsOnceMoreAtMost(t *testing.T) {
	root := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 10000})
	t.Cleanup(func() { c.Close() })
	seed := c.negatives.seed
	c.negatives.hash = func(p string) uint64 { return uint64(uint32(maphash.String(seed, p))) }
	sh, _ := c.negatives.shardOf(0)
	long := strings.Repeat("d", 100)
	path := func(i int) string { return filepath.Join(root, fmt.Sprintf("%s-%05d", long, i)) }
	const live = 200
	for i := range live {
		lookMissing(t, c, []string{path(i)})
	}
	worst, worstLive, worstStep := 0.0, 0, 0
	for i := live; i < 20*live; i++ {
		c.Purge(path(i-live), false)
		lookMissing(t, c, []string{path(i)})
		sh.mu.RLock()
		n := sh.liveBytesLocked()
		capacity := cap(sh.arena)
		sh.mu.RUnlock()
		if r := float64(capacity) / float64(2*n+negArenaMin); r > worst {
			worst, worstLive, worstStep = r, n, i
		}
	}
	t.Logf("worst: arena %.2fx of 2 x %d live bytes + %d, at step %d", worst, worstLive, negArenaMin, worstStep)
	if worst > 1 {
		t.Errorf("the arena reached %.2fx of twice its live bytes (%d) plus %d", worst, worstLive, negArenaMin)
	}
}

// TestHotNegativesSurviveARepeatingScanner: a negative cache of 100
// holds 20 missing paths asked again and again while a scanner asks
// 5,000 distinct missing paths twice each (so that the doorkeeper admits
// them): the hot paths stay negative hits (at most a few misses each,
// when a sweep finds them between two hits), and the cache stays within
// its bound plus the sixteenth a sweep leaves.
func TestHotNegativesSurviveARepeatingScanner(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "keep"), "k")
	c := New(Options{Workers: 2, Revalidate: time.Hour, NegativeEntries: 100})
	t.Cleanup(func() { c.Close() })
	var hot []string
	for i := range 20 {
		hot = append(hot, filepath.Join(root, fmt.Sprintf("hot-%d", i)))
	}
	lookMissing(t, c, hot)
	hotMisses, most := 0, int64(0)
	for i := range 5000 {
		s := filepath.Join(root, fmt.Sprintf("scan-%d", i))
		lookMissing(t, c, []string{s, s})
		if i%5 == 0 {
			for _, p := range hot {
				h := c.counts[NegativeHits].Load()
				lookMissing(t, c, []string{p})
				if c.counts[NegativeHits].Load() == h {
					hotMisses++
				}
			}
		}
		most = max(most, c.counts[NegativeEntries].Load())
	}
	t.Logf("%d misses of %d hot lookups; at most %d negatives", hotMisses, 20*1000, most)
	if hotMisses > 20*3 {
		t.Errorf("%d misses of 20,000 lookups of 20 hot missing paths", hotMisses)
	}
	if most > 101 || int64(c.negatives.len()) != c.counts[NegativeEntries].Load() {
		t.Errorf("at most %d negatives for a bound of 100; %d in the store, counted %d", most, c.negatives.len(), c.counts[NegativeEntries].Load())
	}
}

// TestNegativeWithoutInotifyExpiresAtRevalidate: with inotify off and
// revalidate at 300 ms, a cached 404 (the second lookup is a negative
// hit) answers no longer than revalidate after its lookup once the file
// exists: the file is served within it (10x margin on this loaded
// machine), and a lookup after that is a hit.
func TestNegativeWithoutInotifyExpiresAtRevalidate(t *testing.T) {
	const revalidate = 300 * time.Millisecond
	root := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: revalidate, NoInotify: true})
	t.Cleanup(func() { c.Close() })
	p := filepath.Join(root, "late.html")
	looked := time.Now()
	lookMissing(t, c, []string{p})
	h := c.counts[NegativeHits].Load()
	lookMissing(t, c, []string{p})
	if c.counts[NegativeHits].Load() != h+1 {
		t.Fatal("the second lookup was not a negative hit")
	}
	write(t, p, "late")
	within(t, 10*revalidate, c, p, "4:late")
	t.Logf("served %v after the first lookup", time.Since(looked))
	hits := c.counts[Hits].Load()
	if got := describe(t, c, p); got != "4:late" || c.counts[Hits].Load() != hits+1 {
		t.Errorf("after it was served: %q, %d hits", got, c.counts[Hits].Load()-hits)
	}
}

// TestCreatedWhileNegativesArePublished: four readers look up a missing
// path over and over (misses publishing negatives, hits, revalidations)
// while it is renamed into place; once one lookup has served the file, no later
// lookup may answer 404 (a negative published from an open before the
// creation, after the event was handled, would). 100 paths in turn, with
// revalidate an hour so that only inotify can tell; with the store's
// hash and with one hash for every path.
func TestCreatedWhileNegativesArePublished(t *testing.T) {
	for _, colliding := range []bool{false, true} {
		t.Run(map[bool]string{false: "maphash", true: "one_hash_for_all"}[colliding], func(t *testing.T) {
			createdWhilePublished(t, colliding)
		})
	}
}

func createdWhilePublished(t *testing.T, colliding bool) {
	root := t.TempDir()
	write(t, filepath.Join(root, "keep"), "k")
	c := New(Options{Workers: 4, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	if colliding {
		collide(c)
	}
	for n := range 100 {
		p := filepath.Join(root, fmt.Sprintf("late-%d", n))
		var served atomic.Bool
		var flips atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(4)
		for range 4 {
			go untilStopped(&wg, stop, func(int) {
				wasServed := served.Load()
				switch got := describe(t, c, p); got {
				case "1:x":
					served.Store(true)
				case "missing":
					if wasServed {
						flips.Add(1)
					}
				default:
					t.Errorf("%s: %q", p, got)
				}
			})
		}
		write(t, p+".tmp", "x")
		mustRename(t, p+".tmp", p)
		created := time.Now()
		for !served.Load() && time.Since(created) < eachDelayBound {
			time.Sleep(100 * time.Microsecond)
		}
		// A few hundred lookups after the first 200.
		h := c.counts[Hits].Load()
		for c.counts[Hits].Load() < h+200 && time.Since(created) < eachDelayBound {
			time.Sleep(100 * time.Microsecond)
		}
		close(stop)
		wg.Wait()
		if !served.Load() {
			t.Fatalf("%s not served %v after its creation", p, eachDelayBound)
		}
		if flips.Load() > 0 {
			t.Fatalf("%s: %d lookups answered 404 after the file was served", p, flips.Load())
		}
	}
}

// TestQueueOverflowDropsNegatives: after IN_Q_OVERFLOW (handed to the
// watcher as its read loop would), no cached 404 is left (the store and
// its count are empty), and a path created afterwards, looked up again
// as missing first, is served as soon as inotify tells.
func TestQueueOverflowDropsNegatives(t *testing.T) {
	delays := newChangeDelays(t)
	root := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	var paths []string
	for i := range 5 {
		p := filepath.Join(root, fmt.Sprintf("d%d", i), "missing")
		write(t, filepath.Join(filepath.Dir(p), "keep"), "k")
		lookMissing(t, c, []string{p})
		watchedHit(t, c, p)
		paths = append(paths, p)
	}
	c.watch.handle(-1, unix.IN_Q_OVERFLOW, "")
	if n, k := c.negatives.len(), c.counts[NegativeEntries].Load(); n != 0 || k != 0 {
		t.Fatalf("after an overflow: %d negatives in the store, %d counted", n, k)
	}
	for _, p := range paths {
		if got := watchedHit(t, c, p); got != "missing" {
			t.Fatalf("%s: %q", p, got)
		}
	}
	changed := time.Now()
	write(t, paths[2]+".tmp", "new")
	mustRename(t, paths[2]+".tmp", paths[2])
	t.Logf("served %v after its creation", delays.seen(t, c, changed, paths[2], "3:new"))
}

// TestNegativeSeesItsDirectoryReplaced: root/site/x.html is a cached
// 404; site is renamed away and a new site directory holding x.html
// renamed into its place (a deploy), then the new one deleted and the old
// one renamed back: each time the answer follows within the delay bound.
func TestNegativeSeesItsDirectoryReplaced(t *testing.T) {
	delays := newChangeDelays(t)
	root := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	t.Cleanup(func() { c.Close() })
	site := filepath.Join(root, "site")
	p := filepath.Join(site, "x.html")
	write(t, filepath.Join(site, "keep"), "k")
	write(t, filepath.Join(root, "next", "x.html"), "new")
	lookMissing(t, c, []string{p})
	watchedHit(t, c, p)
	changed := time.Now()
	mustRename(t, site, filepath.Join(root, "old"))
	mustRename(t, filepath.Join(root, "next"), site)
	t.Logf("served %v after the deploy", delays.seen(t, c, changed, p, "3:new"))
	changed = time.Now()
	if err := os.RemoveAll(site); err != nil {
		t.Fatal(err)
	}
	mustRename(t, filepath.Join(root, "old"), site)
	t.Logf("404 %v after the rollback", delays.seen(t, c, changed, p, "missing"))
	if got := watchedHit(t, c, p); got != "missing" {
		t.Fatalf("after the rollback: %q", got)
	}
}
