//go:build linux && !flashserve_portable

package transmit

import (
	"io"

	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"golang.org/x/sys/unix"
)

func ringFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.Contains(target, "io_uring") || strings.Contains(target, "eventfd") {
			n++
		}
	}
	return n
}

// fileBody is a Body over one open file, for Send's own tests.
type fileBody struct{ f *os.File }

func (b fileBody) File() io.ReaderAt      { return b.f }
func (b fileBody) Path() string           { return b.f.Name() }
func (b fileBody) FD() int                { return int(b.f.Fd()) }
func (b fileBody) Size() int64            { fi, _ := b.f.Stat(); return fi.Size() }
func (b fileBody) Data() []byte           { return nil }
func (b fileBody) Hold()                  {}
func (b fileBody) Release()               {}
func (b fileBody) FileID() uint64         { return 0 }
func (b fileBody) NoBlockDevice() bool    { return false }
func (b fileBody) MincoreTrusted() bool   { return true }
func (b fileBody) MarkResident()          {}
func (b fileBody) RecentlyResident() bool { return false }
func (b fileBody) ClaimProbe() bool       { return false }
func (b fileBody) InMemoryFS() bool       { return false }

func testFile(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, b
}

// evict drops a file's pages from the page cache, after writing them back.
// ringSender is a Sender with a ring of its own, closed when the test
// ends.
func ringSender(t *testing.T) *Sender {
	t.Helper()
	r, err := newRing(ringOptions{})
	if err != nil {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	t.Cleanup(func() { r.close() })
	return &Sender{Ring: r, Logger: zap.NewNop()}
}

func evict(t *testing.T, f *os.File) {
	t.Helper()
	f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

func TestRingReadsExactBytes(t *testing.T) {
	before := ringFDs(t)
	r, err := newRing(ringOptions{Entries: 32, Workers: 4})
	if err != nil {
		t.Fatalf("io_uring should work on this kernel: %v", err)
	}
	f, want := testFile(t, 8<<20+123)
	evict(t, f)
	fd := int(f.Fd())
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			buf := make([]byte, 256<<10)
			for range 20 {
				off := rng.Int64N(int64(len(want)))
				n := min(int64(len(buf)), int64(len(want))-off)
				got, err := r.readAt(fd, buf[:n], off)
				if err != nil || int64(got) != n || !bytes.Equal(buf[:n], want[off:off+n]) {
					t.Errorf("read %d at %d: %d bytes, %v", n, off, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// A read past the end returns what there is.
	buf := make([]byte, 4096)
	if n, err := r.readAt(fd, buf, int64(len(want))-100); n != 100 || err != nil {
		t.Errorf("read across the end: %d, %v; want 100, nil", n, err)
	}
	// A read of a bad descriptor fails with its errno.
	if _, err := r.readAt(1<<20, buf, 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("read of a bad fd: %v, want EBADF", err)
	}
	// Injected failures are reported, and the ring goes on.
	r.injectFailures(1)
	if _, err := r.readAt(fd, buf, 0); !errors.Is(err, syscall.ECANCELED) {
		t.Errorf("injected failure: %v, want ECANCELED", err)
	}
	if n, err := r.readAt(fd, buf, 0); n != len(buf) || err != nil {
		t.Errorf("after the failure: %d, %v", n, err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.readAt(fd, buf, 0); !errors.Is(err, errRingClosed) {
		t.Errorf("read after Close: %v, want errRingClosed", err)
	}
	if after := ringFDs(t); after != before {
		t.Errorf("ring and eventfd descriptors: %d before, %d after Close", before, after)
	}
}

// TestColdReadsHoldNoThreads reads 256 cold files at once through the
// ring: the goroutines park, so the OS threads stay bounded by the
// runtime's own, not one per read as with pread.
func TestColdReadsHoldNoThreads(t *testing.T) {
	r, err := newRing(ringOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	var files []*os.File
	for range 256 {
		f, _ := testFile(t, 256<<10)
		evict(t, f)
		files = append(files, f)
	}
	before := proctest.Threads(t)
	var wg sync.WaitGroup
	var peak atomic.Int64
	peak.Store(int64(before))
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if n := int64(proctest.Threads(t)); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			if n, err := r.readAt(int(f.Fd()), buf, 0); n != len(buf) || err != nil {
				t.Errorf("cold read: %d, %v", n, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("threads: %d before, peak %d during 256 cold reads (GOMAXPROCS %d)", before, peak.Load(), runtime.GOMAXPROCS(0))
	if peak.Load() > int64(before+8) {
		t.Errorf("256 cold reads through the ring raised the threads from %d to %d", before, peak.Load())
	}
}

// TestConcurrentReadsShareEnters: reads queued by requests that are
// ready at the same time are entered together, in fewer io_uring_enter
// calls than reads (the block layer plugs per enter, so the disk is
// signalled once per batch), and each gets its own bytes. With one P the
// scheduler runs every ready reader before it polls the network, which
// is when the submitter wakes once the kernel has eagerBelow reads; a
// channel wake-up for every read ran the submitter before the next
// reader.
// readTogether runs read(g) for g in [0, n), each in its own goroutine,
// all let go at once, and waits for them.
func readTogether(n int, read func(g int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			read(g)
		}()
	}
	close(start)
	wg.Wait()
}

func TestConcurrentReadsShareEnters(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r, err := newRing(ringOptions{Entries: 256, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	// One file per reader, as the requests of a cold tree: reads of one
	// file are bounded in flight (perFile), and would wait for each other.
	const readers, size = 128, 8192
	files := make([]*os.File, readers)
	wants := make([][]byte, readers)
	for i := range files {
		files[i], wants[i] = testFile(t, size)
	}
	for round := range 3 {
		for _, f := range files {
			evict(t, f)
		}
		enters0, entered0 := r.counts().enters.Load(), r.counts().entered.Load()
		readTogether(readers, func(g int) {
			buf := make([]byte, size)
			n, err := r.readAt(int(files[g].Fd()), buf, 0)
			if err != nil || n != size || !bytes.Equal(buf, wants[g]) {
				t.Errorf("round %d: read of file %d: %d bytes, %v, equal %v", round, g, n, err, bytes.Equal(buf[:n], wants[g][:n]))
			}
		})
		enters, entered := r.counts().enters.Load()-enters0, r.counts().entered.Load()-entered0
		t.Logf("round %d: %d reads entered in %d io_uring_enter calls", round, entered, enters)
		if entered != readers {
			t.Errorf("round %d: %d reads entered, want %d", round, entered, readers)
		}
		// The first eagerBelow reads are entered at once, one each; sysmon
		// may poll the network in the middle of the burst (every 10 ms),
		// and a loaded machine may deschedule the process. A channel
		// wake-up for every read took 23 to 34 enters here.
		if enters*8 > readers {
			t.Errorf("round %d: %d concurrent reads took %d io_uring_enter calls; want at most %d", round, readers, enters, readers/8)
		}
	}
}

// TestLoneReadIsEnteredAlone: a read with no company is entered by
// itself, at once: each of a sequence of reads, one at a time, has its
// own io_uring_enter with one entry in it, made before its completion
// (the read returns), not held back for a batch.
func TestLoneReadIsEnteredAlone(t *testing.T) {
	r, err := newRing(ringOptions{Entries: 32, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	f, want := testFile(t, 256<<10)
	evict(t, f)
	fd := int(f.Fd())
	buf := make([]byte, 8192)
	for i := range 16 {
		enters0, entered0 := r.counts().enters.Load(), r.counts().entered.Load()
		off := int64(i) * 16384
		n, err := r.readAt(fd, buf, off)
		if err != nil || n != len(buf) || !bytes.Equal(buf, want[off:off+int64(n)]) {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
		if enters, entered := r.counts().enters.Load()-enters0, r.counts().entered.Load()-entered0; enters != 1 || entered != 1 {
			t.Errorf("read %d alone: %d io_uring_enter calls with %d reads before it completed; want 1 with 1", i, enters, entered)
		}
	}
}
