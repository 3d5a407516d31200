//go:build linux

package prewarm

import (
	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lowerFDLimit sets RLIMIT_NOFILE to room more than the descriptors open
// now (base), until restore (also called at the test's end).
func lowerFDLimit(t *testing.T, room int) (base int, restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	base = proctest.FDs(t)
	low := syscall.Rlimit{Cur: uint64(base + room), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Errorf("restoring RLIMIT_NOFILE: %v", err)
			}
		})
	}
	t.Cleanup(restore)
	return base, restore
}

// holdFirstReads makes each worker's first read wait until every worker
// has opened its batch, or for at most d (a batch that could open
// nothing never comes), as on a cold disk: the batches then hold their
// descriptors together.
func holdFirstReads(w *Warmer, d time.Duration) {
	var firsts atomic.Int32
	allOpen := make(chan struct{})
	var once sync.Once
	workers := int32(w.Workers)
	w.verify = func(ctx context.Context, path string, f readFile, n int64) (int64, error) {
		if firsts.Add(1) <= workers {
			if firsts.Load() >= workers {
				once.Do(func() { close(allOpen) })
			}
			select {
			case <-allOpen:
			case <-time.After(d):
			}
		}
		return readPrefix(ctx, nil, f, n, nil)
	}
}

// TestBatchesBackOffOnAFullFDTable: a warm-up of small files holds up to
// Workers × prefetchBatch descriptors (4 × 16 here) between its opens and
// its preads. With room for 24 more descriptors in the fd table (a
// lowered RLIMIT_NOFILE, or a server whose connections use the rest),
// the opens past that fail with EMFILE; the warm-up must not skip those
// files for good, but wait for descriptors to come back (a batch that
// lands frees its 16). The verify hook holds each worker's first read
// until all four batches are open, as a cold disk does.
func TestBatchesBackOffOnAFullFDTable(t *testing.T) {
	const workers, files = 4, 8 * prefetchBatch
	targets := smallTargets(t, files)
	base, restore := lowerFDLimit(t, 24)
	w := &Warmer{Workers: workers}
	holdFirstReads(w, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := w.Run(ctx, targets)
	restore()
	t.Logf("fd table with room for 24: %d of %d files warmed, %v", p.Files, files, err)
	if err != nil || p.Files != files {
		t.Errorf("the warm-up skipped %d of %d files on a full fd table (%v) instead of waiting for its own batches to give descriptors back", files-int(p.Files), files, err)
	}
	if n := proctest.FDs(t); n > base {
		t.Errorf("%d descriptors open after the warm-up, %d before", n, base)
	}
}

// TestWarmUpLeavesTheEndOfTheFDTable: a warm-up does not take the last
// eighth of the fd table, which it leaves to the server's connections and
// cache: with room for 64 more descriptors and 4 workers × 16 files, it
// never has more than 7/8 of RLIMIT_NOFILE open (and one more per worker,
// each the open that finds the line crossed, closed at once), and still
// warms every file.
func TestWarmUpLeavesTheEndOfTheFDTable(t *testing.T) {
	const workers, files = 4, 8 * prefetchBatch
	targets := smallTargets(t, files)
	base, _ := lowerFDLimit(t, 64)
	limit := base + 64
	var mu sync.Mutex
	most := 0
	w := &Warmer{Workers: workers}
	w.prefetched = func(string) {
		mu.Lock() // one count at a time: each holds a descriptor
		defer mu.Unlock()
		most = max(most, proctest.FDs(t)-1) // less the one it holds
	}
	holdFirstReads(w, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := w.Run(ctx, targets)
	t.Logf("RLIMIT_NOFILE %d, %d open before: at most %d open during the warm-up; %d of %d files warmed, %v", limit, base, most, p.Files, files, err)
	if err != nil || p.Files != files {
		t.Errorf("%d of %d files warmed: %v", p.Files, files, err)
	}
	if most > limit-limit/8+workers {
		t.Errorf("the warm-up had %d descriptors open, past 7/8 of the %d the table holds (and one per worker)", most, limit)
	}
}
