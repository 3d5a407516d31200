package prewarm

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

// TestWarmUpYieldsToRequests counts how a warm-up's reads of small files
// interleave with requests: with no request being served, each of its
// four workers has a batch of prefetchBatch reads in flight, all at once;
// while requests are served (Busy), one batch is in flight, its reads
// all at once (the disk keeps a queue) while the other workers wait
// their turn; when the requests stop, the rest of the warm-up runs.
// Reads are held by the test, not timed: the reads of a batch that
// starts while requests are served are let go only once the other three
// workers are seen held back.
func TestWarmUpYieldsToRequests(t *testing.T) {
	const workers, busyRounds = 4, 3
	// Enough that each of the other workers still has a batch to wait with
	// in the last busy round.
	const files = (2*workers + busyRounds) * prefetchBatch
	dir := t.TempDir()
	var targets []Target
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		os.WriteFile(p, make([]byte, 8<<10), 0o644)
		targets = append(targets, Target{Path: p, Size: 8 << 10})
	}
	var busy atomic.Bool
	var mu sync.Mutex
	var active, activeBusy, maxIdle, maxBusy, busyReads int
	arrived := make(chan bool, files)         // a read began; true if while busy
	idleRelease := make(chan struct{})        // closed: lets the idle reads go
	busyRelease := make(chan struct{}, files) // one token lets one busy read go
	readAt := func(ctx context.Context, fd int, buf []byte, off int64, hold func() func()) (int, error) {
		duringBusy := busy.Load()
		mu.Lock()
		active++
		if duringBusy {
			activeBusy++
			busyReads++
			maxBusy = max(maxBusy, activeBusy)
		} else {
			maxIdle = max(maxIdle, active)
		}
		mu.Unlock()
		arrived <- duringBusy
		if duringBusy {
			<-busyRelease
		} else {
			<-idleRelease
		}
		mu.Lock()
		active--
		if duringBusy {
			activeBusy--
		}
		mu.Unlock()
		return len(buf), nil
	}
	w := &Warmer{Workers: workers, ReadAt: readAt, Busy: func() bool {
		return busy.Load()
	}}
	done := make(chan error, 1)
	var p Progress
	go func() {
		var err error
		p, err = w.Run(context.Background(), targets)
		done <- err
	}()
	// No request: every worker's batch is read at once.
	for range workers * prefetchBatch {
		if <-arrived {
			t.Fatal("a read saw requests before any came")
		}
	}
	// Requests arrive; the reads that began before them end.
	busy.Store(true)
	close(idleRelease)
	for round := range busyRounds {
		for range prefetchBatch {
			if !<-arrived {
				t.Fatal("a read began as if no request were served")
			}
		}
		yl := w.yield.Load()
		if yl == nil {
			t.Fatal("the warm-up has no yielder")
		}
		deadline := time.Now().Add(30 * time.Second)
		for yl.waiting.Load() != workers-1 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d workers held back while one batch is read, want the other %d", round, yl.waiting.Load(), workers-1)
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		if activeBusy != prefetchBatch {
			t.Errorf("round %d: %d reads at once while requests are served, want one batch of %d", round, activeBusy, prefetchBatch)
		}
		mu.Unlock()
		for range prefetchBatch {
			busyRelease <- struct{}{}
		}
	}
	// The requests stop: everything else is read.
	busy.Store(false)
	close(busyRelease)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("concurrent reads: %d with no requests, %d while requests were served (%d reads then)", maxIdle, maxBusy, busyReads)
	if maxIdle != workers*prefetchBatch {
		t.Errorf("%d reads at once with no requests, want %d workers × %d", maxIdle, workers, prefetchBatch)
	}
	if busyReads < busyRounds*prefetchBatch || maxBusy != prefetchBatch {
		t.Errorf("%d reads while requests were served, %d of them at once; want at least %d, one batch of %d at a time", busyReads, maxBusy, busyRounds*prefetchBatch, prefetchBatch)
	}
	if p.Files != files {
		t.Errorf("%d files warmed, want all %d once the requests stopped", p.Files, files)
	}
}
