//go:build linux && !flashserve_portable

package pagecache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// processReadBytes is this process's bytes read from block devices, all
// its threads together (/proc/self/io read_bytes): a round of reads over
// which it stays put met no disk, whatever thread made them.
func processReadBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no task I/O accounting here: %v", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("read_bytes: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no read_bytes in /proc/self/io: %q", b)
	return 0
}

// TestReadNoWaitMetDiskOnResidentDataAcrossThreads: a no-wait read of a
// body the page cache holds never says it met the disk, however the
// scheduler moves its goroutine. A raw system call keeps the goroutine on
// its thread only while it is in the kernel: between the two counts it
// runs Go code (time.Now, time.Since, the loop), where a preemption (the
// GC's stack scans, sysmon's 10 ms) lets it go on on another thread whose
// count is another, or lets another goroutine read from the disk on this
// one. The threads here have distinct counts, as a server's do after some
// cold reads; the GC runs all the time, as under an allocating load. A
// round in which this process read anything from a disk (another process
// dropped the caches) proves nothing and is made again.
func TestReadNoWaitMetDiskOnResidentDataAcrossThreads(t *testing.T) {
	const size = 8 << 10
	f := testFile(t, size)
	fd := int(f.Fd())
	if _, err := f.ReadAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	// Threads that have read from the disk, each a different amount.
	var wg sync.WaitGroup
	for i := range 8 {
		p := filepath.Join(t.TempDir(), "cold")
		writeSynced(t, p, (i+1)*64<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			g, err := os.Open(p)
			if err != nil {
				t.Error(err)
				return
			}
			defer g.Close()
			if err := Evict(int(g.Fd())); err != nil {
				t.Error(err)
				return
			}
			if _, err := g.ReadAt(make([]byte, (i+1)*64<<10), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for round := 1; ; round++ {
		rb := processReadBytes(t)
		var calls, met atomic.Int64
		var first atomic.Value
		stop := make(chan struct{})
		var gc sync.WaitGroup
		gc.Add(1)
		go func() {
			defer gc.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.GC()
				}
			}
		}()
		deadline := time.Now().Add(2 * time.Second)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, size)
				for met.Load() == 0 && time.Now().Before(deadline) {
					n, m, err := ReadNoWaitMetDisk(fd, buf, 0)
					calls.Add(1)
					if n != size || err != nil {
						first.CompareAndSwap(nil, fmt.Sprintf("%d bytes, %v", n, err))
						return
					}
					if m {
						met.Add(1)
					}
					runtime.Gosched()
				}
			}()
		}
		wg.Wait()
		close(stop)
		gc.Wait()
		resident, _ := Count(fd, size)
		if rb2 := processReadBytes(t); rb2 != rb || resident != size || first.Load() != nil {
			if round < 3 {
				t.Logf("round %d: this process read %d bytes from a disk, %d of %d resident after (%v): again", round, rb2-rb, resident, size, first.Load())
				continue
			}
			t.Fatalf("round %d: this process read %d bytes from a disk, %d of %d resident after (%v): the test proves nothing", round, rb2-rb, resident, size, first.Load())
		}
		t.Logf("round %d: %d no-wait reads of a resident 8 KiB file, %d said they met the disk; the process read no byte from a disk meanwhile", round, calls.Load(), met.Load())
		if met.Load() != 0 {
			t.Errorf("a no-wait read of a resident body said it met the disk, while this process read nothing from a disk")
		}
		return
	}
}

// BenchmarkNoWaitRead8KiB is the one no-wait read of a fresh entry's
// small body, resident, with and without the count of blocks read in
// around it (ReadNoWaitMetDisk), for the cost on that path.
func BenchmarkNoWaitRead8KiB(b *testing.B) {
	const size = 8 << 10
	p := filepath.Join(b.TempDir(), "small")
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, size)
	b.Run("ReadNoWait", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if n, err := ReadNoWait(fd, buf, 0); n != size || err != nil {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("ReadNoWaitMetDisk", func(b *testing.B) {
		b.ReportAllocs()
		var met int
		for b.Loop() {
			n, m, err := ReadNoWaitMetDisk(fd, buf, 0)
			if n != size || err != nil {
				b.Fatal(n, err)
			}
			if m {
				met++
			}
		}
		b.ReportMetric(float64(met)/float64(b.N), "met/op")
	})
}
