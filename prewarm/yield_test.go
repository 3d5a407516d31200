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

// TestWarmUpYieldsToRequests counts how a warm-up's reads interleave
// with requests: with no request being served its four workers read at
// once; while requests are served (Busy), the reads that start then go
// one at a time; when the requests stop, the rest of the warm-up runs.
// Reads are held by the test, not timed: each read that starts while
// requests are served is let go only once the other three workers are
// seen held back, waiting for their turn.
func TestWarmUpYieldsToRequests(t *testing.T) {
	const workers, files, busyRounds = 4, 40, 8
	dir := t.TempDir()
	var targets []Target
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		os.WriteFile(p, make([]byte, 8<<10), 0o644)
		targets = append(targets, Target{Path: p, Size: 8 << 10})
	}
	var busy atomic.Bool
	var mu sync.Mutex
	var active, activeBusy, maxIdle, maxBusy, busyReads int
	var y atomic.Pointer[yielder]
	arrived := make(chan bool, files)         // a read began; true if while busy
	idleRelease := make(chan struct{})        // closed: lets the idle reads go
	busyRelease := make(chan struct{}, files) // one token lets one busy read go
	readAt := func(ctx context.Context, fd int, buf []byte, off int64, hold func() func()) (int, error) {
		duringBusy := busy.Load()
		y.Store(yielderFrom(ctx))
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
	w := &Warmer{Workers: workers, ReadAt: readAt, Busy: busy.Load}
	done := make(chan error, 1)
	var p Progress
	go func() {
		var err error
		p, err = w.Run(context.Background(), targets)
		done <- err
	}()
	// No request: the four workers read at once.
	for range workers {
		if <-arrived {
			t.Fatal("a read saw requests before any came")
		}
	}
	// Requests arrive; the reads that began before them end.
	busy.Store(true)
	close(idleRelease)
	for range busyRounds {
		if !<-arrived {
			t.Fatal("a read began as if no request were served")
		}
		yl := y.Load()
		if yl == nil {
			t.Fatal("the warm-up has no yielder")
		}
		deadline := time.Now().Add(30 * time.Second)
		for yl.waiting.Load() != workers-1 {
			if time.Now().After(deadline) {
				t.Fatalf("%d reads held back while one is served, want the other %d workers", yl.waiting.Load(), workers-1)
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		if activeBusy != 1 {
			t.Errorf("%d reads at once while requests are served", activeBusy)
		}
		mu.Unlock()
		busyRelease <- struct{}{}
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
	if maxIdle != workers {
		t.Errorf("%d reads at once with no requests, want %d", maxIdle, workers)
	}
	if busyReads < busyRounds || maxBusy != 1 {
		t.Errorf("%d reads while requests were served, %d of them at once; want at least %d, one at a time", busyReads, maxBusy, busyRounds)
	}
	if p.Files != files {
		t.Errorf("%d files warmed, want all %d once the requests stopped", p.Files, files)
	}
}
