//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
)

// waitFor polls cond every 5 ms for up to d and reports whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// ioWorkers counts the process's io-wq worker threads (iou-wrk-*).
func ioWorkers(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/comm"); err == nil && strings.HasPrefix(string(b), "iou-wrk") {
			n++
		}
	}
	return n
}

// TestRingCancelsStalledReads: reads of a FUSE file that hangs are let go
// when their context ends. At most max(2, Workers/4) of them reach the
// kernel (the rest wait at the file's gate and are never submitted), a
// disk file is read meanwhile, the reads that were in the kernel are
// cancelled and keep their hold until their completions, and then every
// slot is free again.
func TestRingCancelsStalledReads(t *testing.T) {
	hang := &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{})}
	mnt := mountFUSE(t, map[string]*fuseFile{"hang.bin": hang})
	f := openFUSE(t, mnt, "hang.bin")
	disk, want := testFile(t, 1<<20)
	r, err := newRing(ringOptions{Workers: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	ctx, cancel := context.WithCancel(context.Background())
	var held, released atomic.Int64
	opts := &readOptions{NoBlockDevice: fileio.NoBlockDeviceFD(int(f.Fd())), Hold: func() func() {
		held.Add(1)
		return func() { released.Add(1) }
	}}
	if !opts.NoBlockDevice {
		t.Fatal("a FUSE file has no block device")
	}
	const readers = 40
	errs := make(chan error, readers)
	for range readers {
		go func() {
			_, err := r.readOnce(ctx, int(f.Fd()), make([]byte, 64<<10), 0, opts)
			errs <- err
		}()
	}
	if !waitFor(10*time.Second, func() bool { return hang.blocked.Load() == 2 }) {
		t.Fatalf("%d reads reached the FUSE server, want 2", hang.blocked.Load())
	}
	time.Sleep(100 * time.Millisecond) // room for a third, which must not come
	if n := hang.started.Load(); n != 2 {
		t.Errorf("%d reads of one file reached the server, want at most max(2, 8/4) = 2", n)
	}
	// The ring still serves other files.
	buf := make([]byte, len(want))
	if n, err := r.readFull(context.Background(), int(disk.Fd()), buf, 0, &readOptions{}); n != len(want) || err != nil || !bytes.Equal(buf, want) {
		t.Errorf("a disk read beside the stalled file: %d, %v", n, err)
	}
	start := time.Now()
	cancel()
	for range readers {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled read returned %v", err)
		}
	}
	t.Logf("40 cancelled reads returned in %v; %d held by the ring", time.Since(start), held.Load())
	if held.Load() != 2 {
		t.Errorf("%d reads were held, want the 2 in the kernel", held.Load())
	}
	// The FUSE server honours the interrupt the cancellation sends: the
	// two reads complete, and their holds are given back.
	if !waitFor(10*time.Second, func() bool { ops, files := r.busy(); return released.Load() == 2 && ops == 0 && files == 0 }) {
		ops, files := r.busy()
		t.Fatalf("after cancelling: %d of 2 holds released, %d operations and %d files busy", released.Load(), ops, files)
	}
	if hang.finished.Load() != 2 {
		t.Errorf("%d reads finished in the server, want 2", hang.finished.Load())
	}
	// A cancelled read without Hold waits for its completion.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.readOnce(ctx2, int(f.Fd()), make([]byte, 4096), 0, &readOptions{NoBlockDevice: true})
		done <- err
	}()
	waitFor(10*time.Second, func() bool { return hang.blocked.Load() == 1 })
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled read without Hold: %v", err)
	}
	if ops, _ := r.busy(); ops != 0 {
		t.Errorf("%d operations busy after a read without Hold returned", ops)
	}
}

// TestAbandonedReadHoldsDescriptor: with a FUSE server that ignores
// interrupts, a cancelled read returns at once while its hold stays taken
// until the server answers; a reused slot's later cancellation does not
// touch the next read in it (generations).
func TestAbandonedReadHoldsDescriptor(t *testing.T) {
	hang := &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{}), ignoreCancel: true}
	mnt := mountFUSE(t, map[string]*fuseFile{"hang.bin": hang})
	f := openFUSE(t, mnt, "hang.bin")
	disk, want := testFile(t, 256<<10)
	r, err := newRing(ringOptions{Entries: 4, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	var released atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.readOnce(ctx, int(f.Fd()), make([]byte, 4096), 0, &readOptions{NoBlockDevice: true,
			Hold: func() func() { return func() { released.Add(1) } }})
		done <- err
	}()
	if !waitFor(10*time.Second, func() bool { return hang.blocked.Load() == 1 }) {
		t.Fatal("the read did not reach the FUSE server")
	}
	start := time.Now()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	t.Logf("the abandoned read returned %v after its cancel", time.Since(start))
	if ops, _ := r.busy(); ops != 1 || released.Load() != 0 {
		t.Errorf("while the server holds the read: %d operations busy, %d released; want 1, 0", ops, released.Load())
	}
	// The other slots keep working, many times over, while the abandoned
	// read's cancellation is in the kernel.
	buf := make([]byte, len(want))
	for i := range 20 {
		if n, err := r.readFull(context.Background(), int(disk.Fd()), buf, 0, &readOptions{}); n != len(buf) || err != nil || !bytes.Equal(buf, want) {
			t.Fatalf("disk read %d beside the abandoned one: %d, %v", i, n, err)
		}
	}
	close(hang.block)
	if !waitFor(10*time.Second, func() bool { ops, _ := r.busy(); return ops == 0 && released.Load() == 1 }) {
		t.Errorf("after the server answered: %d released", released.Load())
	}
}

// TestRingWorkerCapHolds: 40 reads of 40 descriptors of a FUSE file that
// hangs: with Workers 3, at most 3 block in the server at once (the io-wq
// cap holds for the whole ring, since one thread submits); SetWorkers(6),
// as a reload does, lets 6 through.
func TestRingWorkerCapHolds(t *testing.T) {
	hang := &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{}), ignoreCancel: true}
	mnt := mountFUSE(t, map[string]*fuseFile{"hang.bin": hang})
	r, err := newRing(ringOptions{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	const n = 40
	var wg sync.WaitGroup
	for range n {
		f := openFUSE(t, mnt, "hang.bin")
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			if m, err := r.readOnce(context.Background(), int(f.Fd()), buf, 0, &readOptions{NoBlockDevice: true}); m != len(buf) || err != nil {
				t.Errorf("read: %d, %v", m, err)
			}
		}()
	}
	var peak, peakWorkers int64
	watch := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			peak = max(peak, hang.blocked.Load())
			peakWorkers = max(peakWorkers, int64(ioWorkers(t)))
		}
	}
	waitFor(10*time.Second, func() bool { return hang.blocked.Load() >= 3 })
	watch(500 * time.Millisecond)
	t.Logf("cap 3: at most %d reads blocked in the server, %d io-wq threads", peak, peakWorkers)
	if peak != 3 {
		t.Errorf("with an io-wq cap of 3, %d reads blocked at once (40 submitted)", peak)
	}
	r.setWorkers(6)
	// io-wq starts a worker when work is queued (or a worker blocks with
	// work waiting), not when its cap rises: one more read does it, as
	// the next request after a reload would.
	more := openFUSE(t, mnt, "hang.bin")
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.readOnce(context.Background(), int(more.Fd()), make([]byte, 4096), 0, &readOptions{NoBlockDevice: true})
	}()
	peak, peakWorkers = 0, 0
	waitFor(10*time.Second, func() bool { return hang.blocked.Load() >= 6 })
	watch(500 * time.Millisecond)
	t.Logf("cap 6: at most %d reads blocked in the server, %d io-wq threads", peak, peakWorkers)
	if peak != 6 {
		t.Errorf("after SetWorkers(6), %d reads blocked at once", peak)
	}
	close(hang.block)
	wg.Wait()
}

// TestRingCloseIsBounded: Close with reads a FUSE server never answers
// (it ignores interrupts) returns after CloseWait with errRingAbandoned;
// the ring stays mapped and goes away once the reads complete. Close
// with reads the server does let go of returns at once, cleanly.
func TestRingCloseIsBounded(t *testing.T) {
	stuck := &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{}), ignoreCancel: true}
	polite := &fuseFile{size: 1 << 20, direct: true, block: make(chan struct{})}
	mnt := mountFUSE(t, map[string]*fuseFile{"stuck.bin": stuck, "polite.bin": polite})
	before := ringFDs(t)
	for _, c := range []struct {
		file *fuseFile
		name string
	}{{polite, "polite.bin"}, {stuck, "stuck.bin"}} {
		f := openFUSE(t, mnt, c.name)
		r, err := newRing(ringOptions{Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		results := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := r.readOnce(context.Background(), int(f.Fd()), make([]byte, 4096), 0, &readOptions{NoBlockDevice: true})
				results <- err
			}()
		}
		if !waitFor(10*time.Second, func() bool { return c.file.blocked.Load() == 2 }) {
			t.Fatalf("%s: %d reads in the server, want 2", c.name, c.file.blocked.Load())
		}
		start := time.Now()
		err = r.close()
		took := time.Since(start)
		t.Logf("%s: Close took %v: %v", c.name, took, err)
		if c.file == polite {
			if err != nil || took > 2*time.Second {
				t.Errorf("%s: Close returned %v after %v; want nil, soon", c.name, err, took)
			}
			for range 2 {
				if err := <-results; err == nil {
					t.Errorf("%s: a read cancelled by Close succeeded", c.name)
				}
			}
			continue
		}
		if !errors.Is(err, errRingAbandoned) || took < 3*time.Second || took > 30*time.Second {
			t.Errorf("%s: Close returned %v after %v; want errRingAbandoned after 3 s", c.name, err, took)
		}
		select {
		case <-r.torndown():
			t.Error("the abandoned ring was torn down with reads in the kernel")
		default:
		}
		close(c.file.block)
		for range 2 {
			<-results
		}
		select {
		case <-r.torndown():
		case <-time.After(10 * time.Second):
			t.Fatal("the abandoned ring was not torn down after its reads completed")
		}
	}
	if !waitFor(5*time.Second, func() bool { return ringFDs(t) == before }) {
		t.Errorf("ring and eventfd descriptors: %d before, %d after", before, ringFDs(t))
	}
}

// TestShortRingReadsContinue: every ring read reports half of what it
// asked (as kernels before 5.9 and some network filesystems return short
// counts): ReadFull goes on from where each stopped and the span comes
// back exact, a read across the end stops at the end, and a file
// without a block device (a FUSE file) has the rest read with pread.
// The kernel does not give short counts for these files itself: FUSE
// zero-fills a short buffered read, and Linux 6.18 retries a short
// direct-I/O one through io_uring from its start (see ReadFull).
func TestShortRingReadsContinue(t *testing.T) {
	disk, want := testFile(t, 1<<20+333)
	fuse := &fuseFile{size: 1<<20 + 333, direct: true}
	mnt := mountFUSE(t, map[string]*fuseFile{"f.bin": fuse})
	ff := openFUSE(t, mnt, "f.bin")
	r, err := newRing(ringOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	size := int64(len(want))
	for _, c := range []struct {
		what string
		fd   int
		byte func(int64) byte
		read func(fd int, buf []byte, off int64) (int, error)
	}{
		{"disk ReadFull", int(disk.Fd()), func(o int64) byte { return want[o] }, func(fd int, buf []byte, off int64) (int, error) {
			return r.readFull(context.Background(), fd, buf, off, &readOptions{})
		}},
		{"disk ReadLending", int(disk.Fd()), func(o int64) byte { return want[o] }, func(fd int, buf []byte, off int64) (int, error) {
			return r.ReadLending(context.Background(), fd, buf, off, nil)
		}},
		{"FUSE ReadLending", int(ff.Fd()), fuseByte, func(fd int, buf []byte, off int64) (int, error) {
			return r.ReadLending(context.Background(), fd, buf, off, nil)
		}},
	} {
		for _, s := range []struct{ off, n int64 }{{0, 256 << 10}, {12345, 256 << 10}, {size - 50000, 256 << 10}} {
			r.injectShortReads(1 << 20)
			buf := make([]byte, s.n)
			n, err := c.read(c.fd, buf, s.off)
			r.injectShortReads(0)
			wantN := min(s.n, size-s.off)
			if int64(n) != wantN || err != nil {
				t.Errorf("%s at %d: %d bytes, %v; want %d", c.what, s.off, n, err, wantN)
				continue
			}
			for i := range n {
				if buf[i] != c.byte(s.off+int64(i)) {
					t.Errorf("%s at %d: byte %d wrong", c.what, s.off, i)
					break
				}
			}

		}
	}
}
