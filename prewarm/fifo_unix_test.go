//go:build unix

package prewarm

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestWarmUpSkipsAFIFO: a hot set names the files of an earlier run; one
// that is a FIFO now must be skipped, not opened (an open would wait for
// a writer for good).
func TestWarmUpSkipsAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "was-a-file")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := (&Warmer{Workers: 1}).Run(ctx, []Target{{Path: fifo, Size: 4096}})
	if err != nil || p.Files != 0 {
		t.Fatalf("warm-up of a FIFO: %+v, %v; want it skipped", p, err)
	}
}
