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

// TestReadNoWaitMetDiskOfResidentRangeStartingReadahead: a no-wait read
// of a range the page cache holds whole does not meet the disk, though it
// may start the kernel's readahead of what follows: a reader of a large
// file in 64 KiB ranges (pdf.js's way) finds a page marked for readahead
// in a range every readahead window, and the read of that range submits
// the next window's disk reads. They are this thread's, and count in its
// blocks read in, but the request waits for none of them. The descriptor
// is an ordinary one, as the server's are (no FADV_RANDOM); ranges the
// page cache does not hold are read with a blocking read, as the ring
// would read them.
func TestReadNoWaitMetDiskOfResidentRangeStartingReadahead(t *testing.T) {
	const size = 4 << 20
	const rng = 64 << 10
	p := filepath.Join(t.TempDir(), "large")
	writeSynced(t, p, size)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// One thread: what is tested is what the read itself does, not a
	// thread change (TestReadNoWaitMetDiskOnResidentDataAcrossThreads).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	evict(t, f, size)
	buf := make([]byte, rng)
	var cold, resident, met int
	for off := int64(0); off < size; off += rng {
		if pre, err := residentPrefix(fd, off, rng); err != nil || pre < rng {
			cold++
			if _, err := f.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
			continue
		}
		resident++
		before := threadBlocksReadIn()
		start := time.Now()
		n, m, err := ReadNoWaitMetDisk(fd, buf, off)
		took := time.Since(start)
		after := threadBlocksReadIn()
		if n != rng || err != nil {
			t.Fatalf("no-wait read of the resident range at %d KiB: %d, %v", off>>10, n, err)
		}
		if m {
			met++
			t.Logf("range at %d KiB, resident whole: met disk, in %v, blocks read in %d then %d (%d KiB)", off>>10, took, before.blocks, after.blocks, (after.blocks-before.blocks)/2)
		}
	}
	t.Logf("%d ranges of 64 KiB read cold, %d resident, of which %d said they met the disk", cold, resident, met)
	if met != 0 {
		t.Errorf("%d no-wait reads of ranges the page cache held whole said they met the disk (the readahead they started)", met)
	}
}
