package prewarm

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is the time of BusyRate's budget in a test: it moves only
// when a read pauses, so that the bytes read per second are counted on
// it, whatever the load of the machine.
type fakeClock struct {
	mu  sync.Mutex
	at  time.Duration
	day time.Time
	// onPause, if set, is called after each pause with the new time.
	onPause func(time.Duration)
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.day.Add(c.at)
}

func (c *fakeClock) since() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *fakeClock) pause(_ context.Context, d time.Duration) {
	c.mu.Lock()
	c.at += d
	at := c.at
	c.mu.Unlock()
	if c.onPause != nil {
		c.onPause(at)
	}
}

// TestBusyRateBoundsBackgroundBytes: while requests are served, a
// Background warm-up with a BusyRate reads at most that many bytes per
// second of its budget's clock (and one read more: the budget saves
// nothing up, so the first read of a busy spell starts at once); once no
// request is served, the rest is read at once, with no pause. The bytes
// are counted as each file is read (verify), against a clock that moves
// only when the warm-up pauses: its threads take no CPU on the test's
// clock, so the pauses are the budget's alone.
func TestBusyRateBoundsBackgroundBytes(t *testing.T) {
	const (
		rate     = 256 << 10 // bytes per second: one batch of 16 × 8 KiB every half second
		busyFor  = 3 * time.Second
		files    = 40 * prefetchBatch
		fileSize = 8 << 10
		oneRead  = prefetchBatch * fileSize // the most one read (a batch) takes
	)
	targets := smallTargets(t, files)
	var busy atomic.Bool
	busy.Store(true)
	clock := &fakeClock{day: time.Unix(1e9, 0)}
	// The requests stop once the budget's clock has run busyFor.
	clock.onPause = func(at time.Duration) {
		if at >= busyFor {
			busy.Store(false)
		}
	}
	type read struct {
		at   time.Duration
		n    int64
		busy bool
	}
	var mu sync.Mutex
	var reads []read
	w := &Warmer{Workers: 3, Busy: busy.Load, Background: true, BusyRate: rate}
	w.cpu = func() time.Duration { return 0 }
	w.pause, w.now = clock.pause, clock.now
	w.verify = func(_ context.Context, _ string, f readFile, n int64) (int64, error) {
		f.Close()
		mu.Lock()
		defer mu.Unlock()
		reads = append(reads, read{at: clock.since(), n: n, busy: busy.Load()})
		return n, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := w.Run(ctx, targets)
	if err != nil || p.Files != files {
		t.Fatalf("%d of %d files, %v", p.Files, files, err)
	}
	var busyBytes, idleBytes int64
	var lastBusy time.Duration
	for _, r := range reads {
		if !r.busy {
			idleBytes += r.n
			continue
		}
		busyBytes += r.n
		lastBusy = r.at
		// Every byte read by then, against what the budget allows by then.
		if allowed := int64(rate*r.at.Seconds()) + oneRead; busyBytes > allowed {
			t.Errorf("%d bytes read by %v while requests were served, more than the budget's %d (%d/s and one read)", busyBytes, r.at, allowed, rate)
		}
	}
	end := clock.since()
	t.Logf("%d bytes while busy (last at %v of the budget's clock), %d after; the clock stopped at %v", busyBytes, lastBusy, idleBytes, end)
	if busyBytes < 2*oneRead {
		t.Fatalf("only %d bytes read while requests were served: the budget held the warm-up back for good", busyBytes)
	}
	if idleBytes == 0 {
		t.Fatal("nothing was read after the requests stopped")
	}
	// Idle, no read waits for the budget: the clock moves no further than
	// the one pause that saw the requests stop.
	if end > busyFor+busyPoll {
		t.Errorf("the budget's clock ran to %v, past the %v the requests were served (and one poll): reads paused for the budget with no request served", end, busyFor)
	}
}

// TestBusyRateBoundsALargeFile: the chunks of a large file read while
// requests are served take from the same budget, each its 1 MiB, so that
// a file of 4 MiB at 1 MiB a second is read in no less than three
// seconds of the budget's clock (its first chunk at once); idle, it is
// read with no pause.
func TestBusyRateBoundsALargeFile(t *testing.T) {
	const chunks, rate = 4, 1 << 20
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, chunks<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, busy := range []bool{true, false} {
		clock := &fakeClock{day: time.Unix(1e9, 0)}
		w := &Warmer{Workers: 2, Busy: func() bool { return busy }, Background: true, BusyRate: rate}
		w.cpu = func() time.Duration { return 0 }
		w.pause, w.now = clock.pause, clock.now
		p, err := w.Run(context.Background(), []Target{{Path: big, Size: chunks << 20}})
		if err != nil || p.Bytes != chunks<<20 {
			t.Fatalf("busy %v: %d bytes, %v", busy, p.Bytes, err)
		}
		took := clock.since()
		t.Logf("busy %v: %d bytes in %v of the budget's clock", busy, p.Bytes, took)
		switch want := time.Duration(chunks-1) * time.Second; {
		case busy && took < want:
			t.Errorf("%d MiB read in %v while requests were served, want at least %v at %d bytes/s", chunks, took, want, rate)
		case busy && took > want+time.Second:
			t.Errorf("%d MiB read in %v while requests were served, want about %v at %d bytes/s: it paused more than the budget asks", chunks, took, want, rate)
		case !busy && took != 0:
			t.Errorf("idle: the file paused %v for the budget, want none", took)
		}
	}
}
