//go:build unix

package prewarm

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// TestFDLimitIsReadOncePerRun: a warm-up checks each descriptor it opens
// against the size of the fd table (tableNearlyFull), which it reads once
// per Run, not once per file (a prlimit64 for each of 100,000 files).
func TestFDLimitIsReadOncePerRun(t *testing.T) {
	targets := smallTargets(t, 3*prefetchBatch+5)
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	targets = append(targets, Target{Path: big, Size: 2 << 20})
	var calls atomic.Int32
	read := fdTableSize
	fdTableSize = func() uint64 { calls.Add(1); return read() }
	t.Cleanup(func() { fdTableSize = read })
	for run := int32(1); run <= 2; run++ {
		p, err := (&Warmer{Workers: 3}).Run(context.Background(), targets)
		if err != nil || p.Files != int64(len(targets)) {
			t.Fatalf("run %d: %d of %d files, %v", run, p.Files, len(targets), err)
		}
		if got := calls.Load(); got != run {
			t.Errorf("after %d runs over %d files the fd table's size was read %d times, want once per run", run, len(targets), got)
		}
	}
}

// TestLargeFileTurnsArePaidInTheThread: a large file's chunks go through
// ReadAt (the handler's ring) only while no request is served. While
// requests are served, each chunk takes its turn and is read with pread
// in the worker's thread, so that its copy is on the thread clock the
// turn pays with: busyPause times its CPU, backgroundPause times for a
// Background warm-up. Through the ring the kernel's threads copy, which
// no thread clock sees, and a large file took its turns for free. The
// clock is the test's: each reading of it advances it by 1 ms, so that
// each chunk "takes" 1 ms.
func TestLargeFileTurnsArePaidInTheThread(t *testing.T) {
	const chunks = 4
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, chunks<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name             string
		busy, background bool
		pause            time.Duration
	}{
		{"idle", false, false, 0},
		{"busy", true, false, busyPause * time.Millisecond},
		{"busy background", true, true, backgroundPause * time.Millisecond},
	} {
		var mu sync.Mutex
		var clock time.Duration
		var pauses []time.Duration
		var ringReads atomic.Int32
		w := &Warmer{Workers: 2, Busy: func() bool { return c.busy }, Background: c.background}
		w.ReadAt = func(_ context.Context, fd int, buf []byte, off int64, _ func() func()) (int, error) {
			ringReads.Add(1)
			return unix.Pread(fd, buf, off)
		}
		w.cpu = func() time.Duration { mu.Lock(); defer mu.Unlock(); clock += time.Millisecond; return clock }
		w.pause = func(_ context.Context, d time.Duration) { mu.Lock(); defer mu.Unlock(); pauses = append(pauses, d) }
		p, err := w.Run(context.Background(), []Target{{Path: big, Size: chunks << 20}})
		if err != nil || p.Bytes != chunks<<20 {
			t.Fatalf("%s: %d bytes, %v", c.name, p.Bytes, err)
		}
		t.Logf("%s: %d reads through ReadAt, pauses %v", c.name, ringReads.Load(), pauses)
		if !c.busy {
			if ringReads.Load() != chunks || len(pauses) != 0 {
				t.Errorf("%s: %d chunks through ReadAt and %d pauses, want all %d through it and none", c.name, ringReads.Load(), len(pauses), chunks)
			}
			continue
		}
		if ringReads.Load() != 0 {
			t.Errorf("%s: %d chunks went through ReadAt while requests were served: their copies were paid by no turn", c.name, ringReads.Load())
		}
		if len(pauses) != chunks {
			t.Fatalf("%s: %d pauses for %d chunks read while requests were served", c.name, len(pauses), chunks)
		}
		for i, d := range pauses {
			if d != c.pause {
				t.Errorf("%s: pause %d is %v, want %v (the chunk's 1 ms of CPU times %v)", c.name, i, d, c.pause, c.pause/time.Millisecond)
			}
		}
	}
}

// TestBackgroundTakesTurnsWhenRequestsAreCold: a Background warm-up (the
// paths of `prewarm`, keep_hot) reads what no request is known to wait
// for, so requests that wait for the disk give it no full width (Cold is
// for the hot set after a start): it takes turns, one batch at a time,
// each paying backgroundPause times its CPU. Each file's readahead
// "takes" 1 ms of the test's clock.
func TestBackgroundTakesTurnsWhenRequestsAreCold(t *testing.T) {
	const workers, batches = 3, 4
	targets := smallTargets(t, batches*prefetchBatch)
	var mu sync.Mutex
	var clock time.Duration
	var pauses []time.Duration
	var inFlight, most int
	w := &Warmer{Workers: workers, Busy: func() bool { return true }, Cold: func() bool { return true }, Background: true}
	w.prefetched = func(string) {
		mu.Lock()
		defer mu.Unlock()
		clock += time.Millisecond
		inFlight++
		most = max(most, inFlight)
	}
	w.verify = func(_ context.Context, _ string, f readFile, n int64) (int64, error) {
		mu.Lock()
		inFlight--
		mu.Unlock()
		f.Close()
		return n, nil
	}
	w.cpu = func() time.Duration { mu.Lock(); defer mu.Unlock(); return clock }
	w.pause = func(_ context.Context, d time.Duration) { mu.Lock(); defer mu.Unlock(); pauses = append(pauses, d) }
	p, err := w.Run(context.Background(), targets)
	if err != nil || p.Files != int64(len(targets)) {
		t.Fatalf("%d files, %v", p.Files, err)
	}
	t.Logf("cold requests, background: at most %d files in flight, pauses %v", most, pauses)
	if most > prefetchBatch {
		t.Errorf("%d files in flight at once: the background warm-up read at full width beside cold requests, want one batch of %d at a time", most, prefetchBatch)
	}
	if len(pauses) != batches {
		t.Fatalf("%d pauses for %d batches", len(pauses), batches)
	}
	for i, d := range pauses {
		if want := backgroundPause * prefetchBatch * time.Millisecond; d != want {
			t.Errorf("pause %d: %v, want %d × the batch's %v of CPU", i, d, backgroundPause, prefetchBatch*time.Millisecond)
		}
	}
}

// TestLargeFileIsAdvisedAheadOfItsReads: the kernel reads at most one
// readahead window of an advice, so a large file advised once at open
// had its first window read ahead and every chunk after it waited for
// its own I/O. With no request served, each chunk past the first window
// must have been advised before it is read, no more than prefetchAhead
// past the chunk; while requests are served nothing is advised ahead (a
// turn reads its chunk, no more).
func TestLargeFileIsAdvisedAheadOfItsReads(t *testing.T) {
	const size = 3 * prefetchAhead
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, busy := range []bool{false, true} {
		var mu sync.Mutex
		advisedTo := int64(prefetchAhead) // what the open advised
		var advices int
		var unadvised []int64
		adviseRange = func(fd int, off, n int64) {
			mu.Lock()
			defer mu.Unlock()
			advices++
			if off != advisedTo || off+n > size {
				t.Errorf("busy %v: advice of [%d, %d) after [0, %d) was advised", busy, off, off+n, advisedTo)
			}
			advisedTo = off + n
		}
		check := func(off int64, n int) {
			mu.Lock()
			defer mu.Unlock()
			if off+int64(n) > advisedTo {
				unadvised = append(unadvised, off)
			}
			if advisedTo > off+int64(n)+prefetchAhead {
				t.Errorf("busy %v: advised up to %d MiB while reading [%d, %d) MiB: more than %d MiB ahead", busy, advisedTo>>20, off>>20, (off+int64(n))>>20, prefetchAhead>>20)
			}
		}
		w := &Warmer{Workers: 1, Busy: func() bool { return busy }}
		w.ReadAt = func(_ context.Context, fd int, buf []byte, off int64, _ func() func()) (int, error) {
			check(off, len(buf))
			return unix.Pread(fd, buf, off)
		}
		w.cpu = func() time.Duration { return 0 }
		w.pause = func(context.Context, time.Duration) {}
		p, err := w.Run(context.Background(), []Target{{Path: big, Size: size}})
		adviseRange = pagecache.PrefetchRange
		if err != nil || p.Bytes != size {
			t.Fatalf("busy %v: %d bytes, %v", busy, p.Bytes, err)
		}
		t.Logf("busy %v: %d advices, chunks read through ReadAt before they were advised: %v", busy, advices, unadvised)
		if busy {
			if advices != 0 {
				t.Errorf("%d advices ahead of the reads while requests were served, want none", advices)
			}
			continue
		}
		if len(unadvised) > 0 {
			t.Errorf("with no request served, the chunks at %v were read before they were advised", unadvised)
		}
	}
}
