//go:build unix

package prewarm

import (
	"context"
	"os"
	"path/filepath"
	"sync"
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

// TestWarmUpNeverOpensAFIFO: a regular file replaced by a FIFO between a
// look at the path and its open (a deploy renaming files into place, or a
// hostile tenant of the tree) must not make the open wait for a writer:
// the worker would hang, Run never return, and the handler's Cleanup (a
// reload, a Caddy stop) wait for it. Here a path flips between a file
// and a FIFO while a warm-up reads it many times; the test unblocks a
// hung open itself by opening the FIFO for writing.
func TestWarmUpNeverOpensAFIFO(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of warm-ups racing a FIFO swapped in: skipped in -short mode; CI runs it")
	}
	dir := t.TempDir()
	reg, fifo, path := filepath.Join(dir, "reg"), filepath.Join(dir, "fifo"), filepath.Join(dir, "hot.bin")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	os.Link(reg, path)
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			src, tmp := reg, filepath.Join(dir, "tmp-reg")
			if i%2 == 1 {
				src, tmp = fifo, filepath.Join(dir, "tmp-fifo")
			}
			os.Remove(tmp)
			if os.Link(src, tmp) == nil {
				os.Rename(tmp, path)
			}
		}
	}()
	const rounds = 5000
	targets := make([]Target, rounds)
	for i := range targets {
		targets[i] = Target{Path: path, Size: 1}
	}
	// Warm-ups one after the other for up to 20 s, each of a path read
	// 5000 times; one that does not return within 10 s hung.
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan Progress)
	go func() {
		defer close(runs)
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && ctx.Err() == nil; {
			p, _ := (&Warmer{Workers: 2}).Run(ctx, targets)
			runs <- p
		}
	}()
	var p Progress
	hung, warmups := false, 0
wait:
	for {
		select {
		case q, ok := <-runs:
			if !ok {
				break wait
			}
			p.Files += q.Files
			warmups++
		case <-time.After(10 * time.Second):
			hung = true
			break wait
		}
	}
	cancel()
	close(stop)
	flips.Wait()
	if hung {
		// Release the opens that wait on the FIFO: a writer lets them go.
		for {
			select {
			case <-runs:
			default:
				if wf, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					wf.Close()
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			break
		}
		t.Fatalf("warm-up %d of a path that became a FIFO between stat and open hung (its ctx canceled, it still did not return): %d files warmed before", warmups+1, p.Files)
	}
	t.Logf("%d warm-ups of %d reads of a flipping path: %d files warmed; no open waited on the FIFO", warmups, rounds, p.Files)
}
