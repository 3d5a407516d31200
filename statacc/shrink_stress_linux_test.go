//go:build linux

package statacc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestShrinkUnderConcurrentChurn hammers the negative store's shrink and
// the clocks' compaction (janitor expiry, purges, inotify events) with
// concurrent misses, hits, file lookups and evictions, then checks that
// every indexed slot's bytes are still its own path, the counts agree,
// and that after Close no descriptor stays open and no clock holds a live
// entry or miscounts its dead ones.
func TestShrinkUnderConcurrentChurn(t *testing.T) {
	root := t.TempDir()
	const dirs = 4
	files := manyFiles(t, root, dirs, 40)
	c := New(Options{Workers: 4, Revalidate: 200 * time.Millisecond, NegativeEntries: 500, MaxOpenFiles: 64})
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				d := filepath.Join(root, fmt.Sprintf("d%03d", (i+g)%dirs))
				p := filepath.Join(d, fmt.Sprintf("m-%d-%d.bin", g, i%200))
				if e, err := c.Get(ctx, p); err == nil {
					e.Release()
				}
				f := files[(i*7+g)%len(files)]
				if e, err := c.Get(ctx, f); err == nil {
					e.Release()
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			d := filepath.Join(root, fmt.Sprintf("d%03d", i%dirs))
			c.Purge(d, true)
			c.dropStale()
			// An inotify event for a name in the directory, and a new
			// file appearing where a negative may be cached.
			p := filepath.Join(d, fmt.Sprintf("m-0-%d.bin", i%200))
			os.WriteFile(p, nil, 0o644)
			os.Remove(p)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()

	sn := c.Snapshot()
	t.Logf("expired %d, negative evictions %d, evictions %d, invalidations %d, negative hits %d", sn[Expired], sn[NegativeEvictions], sn[Evictions], sn[Invalidations], sn[NegativeHits])
	s := c.negatives
	total := 0
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.RLock()
		sh.indexedLocked(func(tag, i uint32, sl *negSlot) {
			if sl.gone() {
				t.Errorf("shard %d: slot %d indexed under tag %x is free (gen %d)", k, i, tag, sl.gen.Load())
				return
			}
			if p := string(s.appendPath(nil, sh, sl)); negTag(s.hash(p)) != tag {
				t.Errorf("shard %d: slot %d's path %q is not of tag %x", k, i, p, tag)
			}
			total++
		})
		sh.mu.RUnlock()
	}
	if n := c.counts[NegativeEntries].Load(); n != int64(total) {
		t.Errorf("NegativeCount %d, the shards index %d", n, total)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for c.counts[OpenFiles].Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := c.counts[OpenFiles].Load(); n != 0 {
		t.Errorf("%d descriptors open after Close", n)
	}
	if n := c.counts[NegativeEntries].Load(); n != 0 {
		t.Errorf("%d negatives after Close", n)
	}
	c.negs.mu.Lock()
	live := 0
	for _, r := range c.negs.ring {
		if ok, _ := s.live(r, false); ok {
			live++
		}
	}
	if dead := c.negs.dead.Load(); live != 0 || dead != int64(len(c.negs.ring)) {
		t.Errorf("negative clock after Close: %d refs, %d live, dead count %d (want %d)", len(c.negs.ring), live, dead, len(c.negs.ring))
	}
	c.negs.mu.Unlock()
	c.fds.mu.Lock()
	live = 0
	for _, e := range c.fds.ring {
		if !e.gone.Load() {
			live++
		}
	}
	if dead := c.fds.dead.Load(); live != 0 || dead != int64(len(c.fds.ring)) {
		t.Errorf("descriptor clock after Close: %d entries, %d live, dead count %d (want %d)", len(c.fds.ring), live, dead, len(c.fds.ring))
	}
	c.fds.mu.Unlock()
}

// TestShrinkWhileHitAndInserted: a purge of most of a storm rewrites
// every shard's arena and index (shrinkLocked) while other goroutines hit
// the negatives that stay and insert new ones; each kept path is then
// still answered from its own entry, and every slot's bytes are its path.
func TestShrinkWhileHitAndInserted(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// No listing: every missing path is an entry in the store.
	c := New(Options{Workers: 4, Revalidate: time.Hour, NegativeEntries: 100000, listAfter: -1})
	defer c.Close()
	gone, kept := missingPaths(a, "m", 20000), missingPaths(b, "k", 2000)
	lookMissing(t, c, gone)
	lookMissing(t, c, kept)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fresh := missingPaths(b, fmt.Sprintf("n%d", g), 3000)
			for i := 0; !stop.Load(); i++ {
				if got := describe(t, c, kept[(i*31+g)%len(kept)]); got != "missing" {
					bad.Add(1)
				}
				if got := describe(t, c, fresh[i%len(fresh)]); got != "missing" {
					bad.Add(1)
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if n := c.Purge(a, true); n != len(gone) {
		t.Errorf("purged %d, want %d", n, len(gone))
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d lookups of missing paths were not answered missing", n)
	}
	if hits := negativeHitsOf(t, c, kept); hits != int64(len(kept)) {
		t.Errorf("%d negative hits of the %d kept paths after the purge", hits, len(kept))
	}
	s := c.negatives
	rewritten := 0
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.RLock()
		if cap(sh.arena) < 16<<10 {
			rewritten++
		}
		sh.indexedLocked(func(tag, i uint32, sl *negSlot) {
			if p := string(s.appendPath(nil, sh, sl)); negTag(s.hash(p)) != tag || sl.gone() {
				t.Errorf("shard %d: slot %d's path %q is not of tag %x", k, i, p, tag)
			}
		})
		sh.mu.RUnlock()
	}
	t.Logf("%d of %d shards' arenas under 16 KiB after the purge", rewritten, negShards)
}
