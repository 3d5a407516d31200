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

// TestFDPressureBacksOff: while the server reports the fd table full
// (Warmer.FDPressure), a warm-up opens nothing; after three reports its
// first batch takes an eighth of prefetchBatch files, after pauses of 10,
// 20 and 40 ms, and each batch after one that opened all its files takes
// one more; every file is warmed in the end.
func TestFDPressureBacksOff(t *testing.T) {
	const files = 40
	dir := t.TempDir()
	var targets []Target
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, Target{Path: p, Size: 1})
	}
	var mu sync.Mutex
	reports := 0
	var firstOpen time.Duration
	var batches []int // files opened per batch, in order
	reading := true
	start := time.Now()
	w := &Warmer{Workers: 1, FDPressure: func() bool {
		mu.Lock()
		defer mu.Unlock()
		reports++
		return reports <= 3
	}}
	w.prefetched = func(string) {
		mu.Lock()
		defer mu.Unlock()
		if len(batches) == 0 {
			firstOpen = time.Since(start)
		}
		if reading {
			batches = append(batches, 0)
			reading = false
		}
		batches[len(batches)-1]++
	}
	w.verify = func(ctx context.Context, path string, f readFile, n int64) (int64, error) {
		mu.Lock()
		reading = true
		mu.Unlock()
		return readPrefix(ctx, nil, f, n, nil)
	}
	p, err := w.Run(context.Background(), targets)
	t.Logf("first open after %v; batches %v", firstOpen, batches)
	if err != nil || p.Files != files {
		t.Fatalf("%d of %d files warmed: %v", p.Files, files, err)
	}
	if want := []int{2, 3, 4, 5, 6, 7, 8, 5}; fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Errorf("batches of %v files, want %v", batches, want)
	}
	if firstOpen < 70*time.Millisecond {
		t.Errorf("the first open came %v after the start, before the pauses of 10, 20 and 40 ms", firstOpen)
	}
}
