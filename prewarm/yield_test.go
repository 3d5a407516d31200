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

// TestWarmUpYieldsToRequests counts how a warm-up of small files keeps
// reads in flight, and how they interleave with requests. With no
// request being served, each of its four workers starts the readahead of
// a batch of prefetchBatch files before it waits for the first: 64 reads
// in flight. While requests are served (Busy), one batch is in flight
// (the disk keeps a queue of 16) while the other workers wait their
// turn; when the requests stop, the rest of the warm-up runs. The waits
// for the data are held by the test, not timed: a batch that starts
// while requests are served is let go only once the other three workers
// are seen held back.
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
	// inFlight counts the files whose readahead started and whose wait
	// has not ended, busyInFlight those of them started while busy.
	var inFlight, busyInFlight, maxIdle, maxBusy, busyFiles int
	whileBusy := map[string]bool{}            // files whose readahead started while busy
	arrived := make(chan bool, files)         // a wait for the data began; true if its readahead started while busy
	idleRelease := make(chan struct{})        // closed: lets the idle waits go
	busyRelease := make(chan struct{}, files) // one token lets one busy wait go
	w := &Warmer{Workers: workers, Busy: busy.Load}
	w.prefetched = func(path string) {
		b := busy.Load()
		mu.Lock()
		defer mu.Unlock()
		whileBusy[path] = b
		inFlight++
		if b {
			busyFiles++
			busyInFlight++
			maxBusy = max(maxBusy, busyInFlight)
		} else {
			maxIdle = max(maxIdle, inFlight)
		}
	}
	w.verify = func(ctx context.Context, path string, f readFile, n int64) (int64, error) {
		defer f.Close()
		mu.Lock()
		b := whileBusy[path]
		mu.Unlock()
		arrived <- b
		if b {
			<-busyRelease
		} else {
			<-idleRelease
		}
		mu.Lock()
		inFlight--
		if b {
			busyInFlight--
		}
		mu.Unlock()
		return n, nil
	}
	done := make(chan error, 1)
	var p Progress
	go func() {
		var err error
		p, err = w.Run(context.Background(), targets)
		done <- err
	}()
	// No request: every worker starts its whole batch, then waits.
	for range workers {
		if <-arrived {
			t.Fatal("a batch saw requests before any came")
		}
	}
	mu.Lock()
	if inFlight != workers*prefetchBatch {
		t.Errorf("%d reads in flight when each worker waits for its first file, want %d workers × %d", inFlight, workers, prefetchBatch)
	}
	mu.Unlock()
	// Requests arrive; the batches that began before them end.
	busy.Store(true)
	close(idleRelease)
	// nextBusy waits for the next wait of a busy batch, letting by those
	// of the rest of the idle batches.
	idleLeft := workers * (prefetchBatch - 1)
	nextBusy := func() {
		for !<-arrived {
			if idleLeft--; idleLeft < 0 {
				t.Fatal("more files read as if no request were served than the idle batches held")
			}
		}
	}
	for round := range busyRounds {
		nextBusy()
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
		if inFlight != prefetchBatch {
			t.Errorf("round %d: %d reads in flight while requests are served, want one batch of %d", round, inFlight, prefetchBatch)
		}
		mu.Unlock()
		busyRelease <- struct{}{}
		for range prefetchBatch - 1 {
			nextBusy()
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
	t.Logf("reads in flight: %d with no requests, %d while requests were served (%d files then)", maxIdle, maxBusy, busyFiles)
	if maxIdle != workers*prefetchBatch {
		t.Errorf("%d reads in flight with no requests, want %d workers × %d", maxIdle, workers, prefetchBatch)
	}
	if busyFiles < busyRounds*prefetchBatch || maxBusy != prefetchBatch {
		t.Errorf("%d files started while requests were served, %d of them in flight at once; want at least %d, one batch of %d at a time", busyFiles, maxBusy, busyRounds*prefetchBatch, prefetchBatch)
	}
	if p.Files != files {
		t.Errorf("%d files warmed, want all %d once the requests stopped", p.Files, files)
	}
}

// TestBusyBatchesPauseForTheirCPU: while requests are served, a batch
// holds the lane after it for busyPause times the CPU it took, and only
// the CPU (its waits for the disk earn no pause); with no request being
// served, no batch pauses. The CPU clock and the pause are the test's:
// each file's readahead "takes" 1 ms of CPU, each wait for its data none.
func TestBusyBatchesPauseForTheirCPU(t *testing.T) {
	const workers, batches = 3, 4
	targets := smallTargets(t, batches*prefetchBatch)
	for _, busy := range []bool{false, true} {
		var mu sync.Mutex
		var clock time.Duration
		var pauses []time.Duration
		var lanePaused []bool
		w := &Warmer{Workers: workers, Busy: func() bool { return busy }}
		w.prefetched = func(string) { mu.Lock(); clock += time.Millisecond; mu.Unlock() }
		w.verify = func(_ context.Context, _ string, f readFile, n int64) (int64, error) { f.Close(); return n, nil }
		w.cpu = func() time.Duration { mu.Lock(); defer mu.Unlock(); return clock }
		w.pause = func(_ context.Context, d time.Duration) {
			y := w.yield.Load()
			mu.Lock()
			defer mu.Unlock()
			pauses = append(pauses, d)
			lanePaused = append(lanePaused, len(y.lane) == 1)
		}
		p, err := w.Run(context.Background(), targets)
		if err != nil || p.Files != int64(len(targets)) {
			t.Fatalf("busy %v: %d files, %v", busy, p.Files, err)
		}
		t.Logf("busy %v: pauses %v", busy, pauses)
		if !busy {
			if len(pauses) != 0 {
				t.Errorf("with no request served, %d batches paused", len(pauses))
			}
			continue
		}
		if len(pauses) != batches {
			t.Fatalf("%d pauses for %d batches read while requests were served", len(pauses), batches)
		}
		for i, d := range pauses {
			// One batch at a time holds the lane, so the clock advanced by
			// its own files only.
			if want := busyPause * prefetchBatch * time.Millisecond; d != want {
				t.Errorf("pause %d: %v, want %d × the batch's %v of CPU", i, d, busyPause, prefetchBatch*time.Millisecond)
			}
			if !lanePaused[i] {
				t.Errorf("pause %d let go of the lane: another batch could run during it", i)
			}
		}
	}
}

// TestColdRequestsGetAFullWidthWarmUp: while the requests being served
// wait for the disk themselves (Cold), a warm-up reads as with no
// request: every worker's batch in flight at once and no pause; when they
// do not (Cold reports false), batches take turns and pause as with Busy
// alone. The CPU clock and the pauses are the test's: each file's
// readahead "takes" 1 ms of CPU.
func TestColdRequestsGetAFullWidthWarmUp(t *testing.T) {
	const workers, batches = 3, 6
	targets := smallTargets(t, batches*prefetchBatch)
	for _, cold := range []bool{true, false} {
		var mu sync.Mutex
		var clock time.Duration
		var pauses []time.Duration
		var inFlight, maxInFlight, heldBack int
		allIn := make(chan struct{})
		var once sync.Once
		deadline := time.Now().Add(30 * time.Second)
		w := &Warmer{Workers: workers, Busy: func() bool { return true }, Cold: func() bool { return cold }}
		w.prefetched = func(string) {
			mu.Lock()
			defer mu.Unlock()
			clock += time.Millisecond
			inFlight++
			maxInFlight = max(maxInFlight, inFlight)
			if inFlight == workers*prefetchBatch {
				once.Do(func() { close(allIn) })
			}
		}
		w.verify = func(_ context.Context, _ string, f readFile, n int64) (int64, error) {
			defer f.Close()
			if cold {
				// The first batches wait until every worker's is in flight,
				// or until one is seen held back for its turn (then none
				// waits any more).
			wait:
				for {
					select {
					case <-allIn:
						break wait
					default:
					}
					if y := w.yield.Load(); y != nil && y.waiting.Load() > 0 {
						mu.Lock()
						heldBack++
						mu.Unlock()
						once.Do(func() { close(allIn) })
						break
					}
					if time.Now().After(deadline) {
						t.Error("the first batches were not all in flight after 30 s, and no worker was seen held back")
						once.Do(func() { close(allIn) })
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			mu.Lock()
			inFlight--
			mu.Unlock()
			return n, nil
		}
		w.cpu = func() time.Duration { mu.Lock(); defer mu.Unlock(); return clock }
		w.pause = func(_ context.Context, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			pauses = append(pauses, d)
		}
		p, err := w.Run(context.Background(), targets)
		if err != nil || p.Files != int64(len(targets)) {
			t.Fatalf("cold %v: %d files, %v", cold, p.Files, err)
		}
		mu.Lock()
		t.Logf("cold %v: at most %d reads in flight, %d pauses, %d reads saw a worker held back", cold, maxInFlight, len(pauses), heldBack)
		if cold {
			if maxInFlight != workers*prefetchBatch || heldBack != 0 || len(pauses) != 0 {
				t.Errorf("requests waiting for the disk: %d reads in flight at most, %d saw a worker held back, %d pauses; want %d × %d, none, none",
					maxInFlight, heldBack, len(pauses), workers, prefetchBatch)
			}
		} else if maxInFlight != prefetchBatch || len(pauses) != batches {
			t.Errorf("requests served from memory: %d reads in flight at most, %d pauses; want one batch of %d at a time, %d pauses",
				maxInFlight, len(pauses), prefetchBatch, batches)
		}
		mu.Unlock()
	}
}

// smallTargets writes n files of 8 KiB in a new directory.
func smallTargets(t *testing.T, n int) []Target {
	t.Helper()
	dir := t.TempDir()
	var targets []Target
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(p, make([]byte, 8<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, Target{Path: p, Size: 8 << 10})
	}
	return targets
}

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
