//go:build linux

package prewarm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func openFDCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// TestBatchesBackOffOnAFullFDTable: a warm-up of small files holds up to
// Workers × prefetchBatch descriptors (4 × 16 here) between its opens and
// its preads. With room for 24 more descriptors in the fd table (a
// lowered RLIMIT_NOFILE, or a server whose connections use the rest),
// the opens past that fail with EMFILE; the warm-up records the error and
// skips those files for good, rather than waiting for descriptors to come
// back (a batch that lands frees its 16). The verify hook holds each
// worker's first read until all four batches are open, as a cold disk
// does.
func TestBatchesBackOffOnAFullFDTable(t *testing.T) {
	const workers, files = 4, 8 * prefetchBatch
	dir := t.TempDir()
	var targets []Target
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(p, make([]byte, 8<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, Target{Path: p, Size: 8 << 10})
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	base := openFDCount(t)
	low := syscall.Rlimit{Cur: uint64(base + 24), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Errorf("restoring RLIMIT_NOFILE: %v", err)
			}
		}
	}
	defer restore()
	var firsts atomic.Int32
	allOpen := make(chan struct{})
	var once sync.Once
	w := &Warmer{Workers: workers}
	w.verify = func(ctx context.Context, f *os.File, n int64) (int64, error) {
		if firsts.Add(1) <= workers {
			if firsts.Load() >= workers {
				once.Do(func() { close(allOpen) })
			}
			select {
			case <-allOpen:
			case <-time.After(5 * time.Second): // a batch that could open nothing never comes
			}
		}
		return readPrefix(ctx, f, n, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := w.Run(ctx, targets)
	restore()
	t.Logf("fd table with room for 24: %d of %d files warmed, %v", p.Files, files, err)
	if err != nil || p.Files != files {
		t.Errorf("the warm-up skipped %d of %d files on a full fd table (%v) instead of waiting for its own batches to give descriptors back", files-int(p.Files), files, err)
	}
	if n := openFDCount(t); n > base {
		t.Errorf("%d descriptors open after the warm-up, %d before", n, base)
	}
}
