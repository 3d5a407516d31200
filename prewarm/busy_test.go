package prewarm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestBusyLargeFilesPauseForTheirCPU: docs/prewarm.md says that while
// requests are served "a warm-up takes at most a quarter of a core" from
// them, but only a batch of small files pays for its CPU with a pause; a
// large file (over 128 KiB) read by pread (no ring: the portable build,
// a ring that could not be set up) takes one
// 1 MiB chunk per turn and never pauses, however much CPU its copies
// take. Here 8 files of 2 MiB are read while requests are served, with
// the thread's real CPU clock: each chunk should hold its turn for three
// times the CPU it took.
func TestBusyLargeFilesPauseForTheirCPU(t *testing.T) {
	dir := t.TempDir()
	var targets []Target
	for i := range 8 {
		p := filepath.Join(dir, fmt.Sprintf("big%d", i))
		if err := os.WriteFile(p, make([]byte, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, Target{Path: p, Size: 2 << 20})
	}
	var mu sync.Mutex
	var paused time.Duration
	pauses := 0
	w := &Warmer{Workers: 2, Busy: func() bool { return true }}
	w.cpu = threadCPU
	if w.cpu == nil { // no thread clock here: a read "takes" 500 µs
		var clock time.Duration
		w.cpu = func() time.Duration { mu.Lock(); defer mu.Unlock(); clock += 500 * time.Microsecond; return clock }
	}
	w.pause = func(_ context.Context, d time.Duration) { mu.Lock(); defer mu.Unlock(); pauses++; paused += d }
	p, err := w.Run(context.Background(), targets)
	if err != nil || p.Files != int64(len(targets)) {
		t.Fatalf("%d files, %v", p.Files, err)
	}
	t.Logf("%d MiB of large files read by pread while requests were served: %d pauses, %v in all", p.Bytes>>20, pauses, paused)
	if pauses == 0 {
		t.Errorf("%d chunks of 1 MiB read while requests were served, none paused for the CPU it took", p.Bytes>>20)
	}
}
