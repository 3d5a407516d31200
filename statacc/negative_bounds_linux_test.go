//go:build linux && !flashserve_portable

package statacc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestExistingFileMissOpensOnceWithNegativesOff: with negative caching
// off (negative_cache 0), the first lookup of a file that exists opens it
// once, as it did before the negative cache's probe (#16 item 1, "a miss
// that costs one open"). The probe that answers first misses of a full
// cache without the watcher runs for every miss when negatives are off
// (negativesFull is true), so an existing file is opened by the probe,
// closed, and opened again by the lookup proper.
func TestExistingFileMissOpensOnceWithNegativesOff(t *testing.T) {
	c := New(Options{Workers: 2, NegativeEntries: -1, Revalidate: time.Hour})
	defer c.Close()
	if n := firstLookupOpens(t, c, t.TempDir()); n != 1 {
		t.Errorf("the first lookup of an existing file opened it %d times, want 1", n)
	}
}

// TestExistingFileMissOpensOnceWhenNegativesFull: once the negative cache
// is full (a scanner filled it), the first lookup of a file that exists
// still opens it once. The probe that keeps a scanner's paths out of the
// watcher opens it first, finds it, closes it, and the lookup opens it
// again: every cold hit costs two opens for as long as the negative cache
// stays full.
func TestExistingFileMissOpensOnceWhenNegativesFull(t *testing.T) {
	root := t.TempDir()
	c, _ := fullNegativeCache(t, root, 100)
	if n := firstLookupOpens(t, c, filepath.Join(root, "site")); n != 1 {
		t.Errorf("the first lookup of an existing file in a cache whose negatives are full opened it %d times, want 1", n)
	}
}

// TestHugeBoundsDoNotCompactEveryAdd: a bound set very large (a user's
// "unlimited", negative_cache 9223372036854775807, which Validate
// accepts) must not make the clock compact its ring on every admission.
// 2*bound+64 overflows to 62, so every ringAdd past 62 entries walks the
// whole ring (and resets its hand): quadratic in the number of entries.
func TestHugeBoundsDoNotCompactEveryAdd(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 2, NegativeEntries: math.MaxInt, Revalidate: time.Hour})
	defer c.Close()
	lookMissing(t, c, missingPaths(dir, "m", 200))
	c.negs.mu.Lock()
	c.negs.hand = 100 // a mark: a compaction resets the hand to 0
	c.negs.mu.Unlock()
	lookMissing(t, c, missingPaths(dir, "one-more", 1))
	c.negs.mu.Lock()
	hand, n := c.negs.hand, len(c.negs.ring)
	c.negs.mu.Unlock()
	if hand != 100 {
		t.Errorf("admitting one negative entry into a ring of %d live ones, far below its bound, compacted it (hand %d)", n, hand)
	}
}

// TestNegativeHeapAfterChurnStaysAsDocumented: the option's doc says a
// negative entry costs about 100 B of heap with a 20-byte path below the
// site's root, 12 MiB at the default with 100-byte paths. Negatives churn: every one expires after revalidate and
// the janitor drops it, files appear where negatives were, Purge. The
// dropped entries stay referenced by the negative clock's ring until it
// is compacted past 2*bound+64 entries, so a cache refilled once after
// its negatives were dropped holds the heap of twice its entries.
func TestNegativeHeapAfterChurnStaysAsDocumented(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	// No listing: every missing path is an entry in the store.
	c := New(Options{Workers: 2, NegativeEntries: n, Revalidate: time.Hour, listAfter: -1})
	defer c.Close()
	describe(t, c, filepath.Join(dir, "warm-up"))
	c.Purge(dir, true)
	first := missingPaths(dir, "first", n)
	second := missingPaths(dir, "second", n)
	heap := heapAfterGC
	base := heap()
	lookMissing(t, c, first)
	fresh := float64(heap()-base) / n
	// What the janitor does to every negative after revalidate.
	if got := c.Purge(dir, true); got != n {
		t.Fatalf("purged %d, want %d", got, n)
	}
	first = nil
	lookMissing(t, c, second)
	if got := c.counts[NegativeEntries].Load(); got != n {
		t.Fatalf("%d negative entries, want %d", got, n)
	}
	churned := float64(heap()-base) / n
	c.negs.mu.Lock()
	ring := len(c.negs.ring)
	c.negs.mu.Unlock()
	t.Logf("heap per cached negative entry (path included): fresh %.0f B, after one refill %.0f B; ring %d for %d entries", fresh, churned, ring, n)
	if churned > 1.25*fresh {
		t.Errorf("after one refill a cached negative entry costs %.0f B of heap, %.1fx the %.0f B of a fresh cache: dropped entries are kept by the ring", churned, churned/fresh, fresh)
	}
}

// --- Scenarios that hold on main (kept as regression tests). ---

// TestFirstMissWhenFullSeesChangesAtOnce: a path whose only trace is the
// doorkeeper (its first miss in a full cache) is looked up again by its
// next request, so a file created, renamed into place, a `current` link
// swapped or a parent directory made is served at once; once admitted (a
// second miss) it is seen as soon as inotify tells.
func TestFirstMissWhenFullSeesChangesAtOnce(t *testing.T) {
	delays := newChangeDelays(t)
	root := t.TempDir()
	c, _ := fullNegativeCache(t, root, 100)
	steps := appearances(t, root)
	for _, admitted := range []bool{false, true} {
		for _, s := range steps {
			p := s.path
			if admitted {
				p = filepath.Join(filepath.Dir(s.path), "a-"+filepath.Base(s.path))
				if s.name == "current swapped" {
					symlinkSwap(t, root, "current", "release-1")
					write(t, filepath.Join(root, "release-2", filepath.Base(p)), "two")
				}
			}
			lookMissing(t, c, []string{p})
			if admitted {
				for c.counts[NegativeEntries].Load() < 100 {
					lookMissing(t, c, missingPaths(root, fmt.Sprintf("fill-%d", time.Now().UnixNano()), 1))
				}
				lookMissing(t, c, []string{p, p})
				if got := watchedHit(t, c, p); got != "missing" {
					t.Fatalf("%s: %q", p, got)
				}
			}
			changed := time.Now()
			switch {
			case !admitted:
				s.apply()
			case s.name == "current swapped":
				symlinkSwap(t, root, "current", "release-2")
			default:
				write(t, p, s.want[len("N:"):])
			}
			took := delays.seen(t, c, changed, p, s.want)
			t.Logf("%s (admitted %v): seen after %v", s.name, admitted, took)
		}
	}
}

// TestFirstMissWhenFullAnswersAsACacheWithRoom: the probe that answers a
// first miss in a full cache gives the same answer as a lookup in a cache
// with room, in every confinement: missing, ENOTDIR below a file,
// refusals of deny and beneath, on both its first and its second miss.
func TestFirstMissWhenFullAnswersAsACacheWithRoom(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "site")
	write(t, filepath.Join(site, "file.txt"), "f")
	write(t, filepath.Join(root, "outside/secret"), "s")
	os.Symlink("file.txt", filepath.Join(site, "rel-link"))
	os.Symlink(filepath.Join(root, "outside"), filepath.Join(site, "abs-out"))
	os.Symlink("../outside", filepath.Join(site, "rel-out"))
	paths := []string{"nope", "file.txt/x", "file.txt/x/y", "rel-link", "rel-link/x", "abs-out/secret", "abs-out/none", "rel-out/secret", "rel-out/none", "no-dir/x"}
	full, _ := fullNegativeCache(t, filepath.Join(root, "elsewhere"), 50)
	for _, mode := range []Symlinks{SymlinksFollow, SymlinksDeny, SymlinksBeneath} {
		room := New(Options{Workers: 2, Revalidate: time.Hour})
		for _, rel := range paths {
			p := filepath.Join(site, rel)
			_, werr := room.getConfined(context.Background(), site, mode, p)
			want := errClass(werr)
			for i := range 3 {
				e, err := full.getConfined(context.Background(), site, mode, p)
				if e != nil {
					e.Release()
				}
				if got := errClass(err); got != want {
					t.Errorf("%v %s, lookup %d in a full cache: %s, a cache with room says %s", mode, rel, i+1, got, want)
				}
			}
		}
		room.Close()
	}
}

// TestFullNegativeCacheCountsStayConsistent: concurrent first and second
// misses of a full negative cache, hits, Purges, files appearing and
// going and canceled waiters leave the counters equal to what the cache
// holds, the rings within their bound and every cached negative on its
// clock, under -race.
func TestFullNegativeCacheCountsStayConsistent(t *testing.T) {
	const bound = 64
	root := t.TempDir()
	c := New(Options{Workers: 2, NegativeEntries: bound, Revalidate: time.Hour, queueLength: 4096})
	defer c.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go untilStopped(&wg, stop, func(i int) {
			// A few paths asked often (admitted), many once (a scanner).
			p := filepath.Join(root, fmt.Sprintf("d%d", i%3), "hot-"+strconv.Itoa(i%40))
			if i%2 == 1 {
				p = filepath.Join(root, fmt.Sprintf("d%d", i%3), fmt.Sprintf("scan-%d-%d", g, i))
			}
			ctx := context.Background()
			if i%7 == 0 {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				ctx = cctx
			}
			if e, err := c.Get(ctx, p); err == nil {
				e.Release()
			}
		})
	}
	wg.Add(1)
	go untilStopped(&wg, stop, func(i int) {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%3), "hot-"+strconv.Itoa(i%40))
		switch i % 4 {
		case 0:
			write(t, p, "x")
		case 1:
			os.Remove(p)
		case 2:
			c.Purge(filepath.Join(root, fmt.Sprintf("d%d", i%3)), true)
		}
		time.Sleep(time.Millisecond)
	})
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	// Quiesce: the events of the last changes are read.
	deadline := time.Now().Add(5 * time.Second)
	for {
		negs, inRing := 0, 0
		negs = c.negatives.len()
		c.negs.mu.Lock()
		ringLen := len(c.negs.ring)
		live := map[negRef]bool{}
		for _, r := range c.negs.ring {
			if ok, _ := c.negatives.live(r, false); ok {
				inRing++
				if live[r] {
					t.Errorf("%v is twice on the clock", r)
				}
				live[r] = true
			}
		}
		c.negs.mu.Unlock()
		count := c.counts[NegativeEntries].Load()
		if int64(negs) == count && inRing == negs {
			t.Logf("%d negative entries, %d on a ring of %d; %d evictions, %d negative hits", negs, inRing, ringLen, c.counts[NegativeEvictions].Load(), c.counts[NegativeHits].Load())
			if ringLen > 2*bound+64 {
				t.Errorf("ring of %d entries for a bound of %d", ringLen, bound)
			}
			if negs > bound+8 {
				t.Errorf("%d negative entries for a bound of %d", negs, bound)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter says %d negative entries, the map holds %d, the ring %d live", count, negs, inRing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Purge(root, true)
	if got := c.counts[NegativeEntries].Load(); got != 0 {
		t.Errorf("%d negative entries counted after purging everything", got)
	}
}

// TestModTimeAndValidatorsAsFileServer: the compacted mtime (seconds and
// nanoseconds) gives the same ModTime, ETag and Last-Modified as
// file_server computes from the FileInfo, for nanoseconds, times before
// 1970, far in the future, and the useless epoch ones.
func TestModTimeAndValidatorsAsFileServer(t *testing.T) {
	dir := t.TempDir()
	c := New(Options{Workers: 2, Revalidate: time.Hour})
	defer c.Close()
	times := []time.Time{
		time.Unix(1700000000, 123456789),
		time.Unix(1700000000, 0),
		time.Unix(1700000000, 999999999),
		time.Unix(-1, 0),
		time.Unix(-1, 500000000),
		time.Unix(-86400*365*60, 1),
		time.Unix(-(1 << 31), 0),
		time.Unix(0, 0),
		time.Unix(0, 1),
		time.Unix(1, 0),
		time.Unix(1, 999999999),
		time.Unix(2, 0),
		time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC),
		time.Date(2400, 1, 1, 0, 0, 0, 5, time.UTC),
		time.Date(2446, 5, 10, 22, 38, 55, 0, time.UTC),
	}
	for i, mt := range times {
		p := filepath.Join(dir, fmt.Sprintf("f%02d.txt", i))
		write(t, p, "content")
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		ref := info.ModTime()
		wantETag, wantLM, wantMod := "", "", time.Time{}
		if u := ref.Unix(); u != 0 && u != 1 {
			wantETag = `"` + strconv.FormatInt(ref.UnixNano(), 36) + "-" + strconv.FormatInt(info.Size(), 36) + `"`
			wantLM = ref.UTC().Format(http.TimeFormat)
			wantMod = ref
		}
		e, err := c.Get(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if e.ETag() != wantETag || e.LastModified() != wantLM || !e.ModTime().Equal(wantMod) || e.ModTime().IsZero() != wantMod.IsZero() || e.Length() != "7" {
			t.Errorf("mtime %v (stat %v): ETag %q LM %q ModTime %v Length %q; want %q %q %v 7",
				mt, ref, e.ETag(), e.LastModified(), e.ModTime(), e.Length(), wantETag, wantLM, wantMod)
		}
		e.Release()
	}
}

// TestMergedFirstMissesWhenFull: misses of one path merged into one call
// while the negative cache is full, queued behind busy slots (so the call
// goes to a worker and its channel is made by the waiters), some of them
// with contexts that end while they wait: every waiter is woken with the
// answer or its context's error, and the call leaves nothing behind.
func TestMergedFirstMissesWhenFull(t *testing.T) {
	root := t.TempDir()
	c, _ := fullNegativeCache(t, filepath.Join(root, "kept"), 50)
	for round := range 20 {
		p := filepath.Join(root, fmt.Sprintf("merged-%d", round))
		release := holdSlots(c)
		var wg sync.WaitGroup
		errs := make([]error, 16)
		ctxs := make([]context.CancelFunc, 16)
		for i := range errs {
			ctx, cancel := context.WithCancel(context.Background())
			ctxs[i] = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = c.Get(ctx, p)
			}()
		}
		waitFor := time.Now().Add(5 * time.Second)
		for c.counts[Misses].Load()+c.counts[Merged].Load() < int64(50+16*(round+1)) && time.Now().Before(waitFor) {
			time.Sleep(time.Millisecond)
		}
		for i := 0; i < 16; i += 3 {
			ctxs[i]()
		}
		release()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: waiters not woken", round)
		}
		for i, err := range errs {
			if !errors.Is(err, fs.ErrNotExist) && !(i%3 == 0 && errors.Is(err, context.Canceled)) {
				t.Errorf("round %d waiter %d: %v", round, i, err)
			}
		}
		for _, cancel := range ctxs {
			cancel()
		}
	}
	c.mu.Lock()
	left := len(c.inflight)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d calls left in flight", left)
	}
}

// TestScannerInFullCacheGrowsNothing: a scanner of many distinct missing
// paths in a full negative cache, in many directories, leaves the
// negative clock, the doorkeeper and the watcher as they were: nothing
// per scanned path is kept.
func TestScannerInFullCacheGrowsNothing(t *testing.T) {
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	lookMissing(t, c, missingPaths(filepath.Join(root, "warm"), "w", 1)) // makes the doorkeeper
	slots := len(c.door().slots)
	nodes := c.counts[WatchedDirs].Load()
	for d := range 20 {
		lookMissing(t, c, missingPaths(filepath.Join(root, fmt.Sprintf("scan-%02d", d)), "s", 1000))
	}
	c.negs.mu.Lock()
	ring := len(c.negs.ring)
	c.negs.mu.Unlock()
	if ring > 2*100+64 || c.counts[NegativeEntries].Load() != 100 || len(c.door().slots) != slots || c.counts[WatchedDirs].Load() != nodes {
		t.Errorf("after 20,000 scanned paths: ring %d, %d negatives, doorkeeper %d slots (%d before), %d watcher nodes (%d before)",
			ring, c.counts[NegativeEntries].Load(), len(c.door().slots), slots, c.counts[WatchedDirs].Load(), nodes)
	}
	if got := negativeHitsOf(t, c, kept); got != int64(len(kept)) {
		t.Errorf("%d of %d kept paths are still hits", got, len(kept))
	}
}

// TestNegativeHitAllocatesNothing: a negative hit in a full cache
// allocates nothing and makes no system call (it is answered from the
// entry: the hit counter moves, the miss counter does not).
func TestNegativeHitAllocatesNothing(t *testing.T) {
	root := t.TempDir()
	c, kept := fullNegativeCache(t, root, 100)
	ctx := context.Background()
	misses := c.counts[Misses].Load()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Get(ctx, kept[7]); !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	})
	if allocs != 0 || c.counts[Misses].Load() != misses {
		t.Errorf("a negative hit: %.1f allocations, %d misses", allocs, c.counts[Misses].Load()-misses)
	}
}

// TestDroppedSmallFilesFreeTheirBodies: the bodies of small files kept in
// memory count against memory_cache's budget while their entries are
// cached; once the entries are dropped (Purge here; the janitor drops
// every entry after revalidate, an event drops a changed file's), the
// budget's counter says they are free, and the heap must free them too.
// The clocks keep a dropped entry (and so its body) until they are
// compacted: once the dropped bodies pass an eighth of the budget, the
// janitor compacts them (compactFileRings).
func TestDroppedSmallFilesFreeTheirBodies(t *testing.T) {
	// Bodies larger than the default 16 KiB, so that what the cache's
	// structures keep beyond the bodies (the map, the hot set) is small
	// beside them.
	const files, size = 300, 32 << 10
	root := t.TempDir()
	body := make([]byte, size)
	paths := make([]string, files)
	for i := range paths {
		paths[i] = filepath.Join(root, fmt.Sprintf("f%04d.txt", i))
		if err := os.WriteFile(paths[i], body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Options{Workers: 2, MaxOpenFiles: 1000, MemoryMaxFile: size, Revalidate: time.Hour})
	defer c.Close()
	describe(t, c, filepath.Join(root, "warm-up"))
	heap := heapAfterGC
	base := heap()
	ctx := context.Background()
	for round := range 3 {
		for _, p := range paths {
			e, err := c.Get(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if e.Data() == nil {
				t.Fatalf("%s: not kept in memory", p)
			}
			e.Release()
		}
		if got := c.counts[MemoryBytes].Load(); got != files*size {
			t.Fatalf("round %d: %d bytes in memory, want %d", round, got, files*size)
		}
		c.Purge(root, true)
	}
	held := heap() - base
	c.fds.mu.Lock()
	ring := len(c.fds.ring)
	c.fds.mu.Unlock()
	t.Logf("after dropping everything: memory_bytes %d, heap %d B above the empty cache's, descriptors' ring %d entries",
		c.counts[MemoryBytes].Load(), held, ring)
	if c.counts[MemoryBytes].Load() != 0 {
		t.Errorf("memory_bytes %d with nothing cached", c.counts[MemoryBytes].Load())
	}
	if held > files*size/4 {
		t.Errorf("nothing is cached, yet %d B of heap are held (the bodies of %d files are %d B): dropped entries are kept by the ring", held, files, files*size)
	}
}
