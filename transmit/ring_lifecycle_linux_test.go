//go:build linux && !flashserve_portable

package transmit

import (
	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/fileio"
	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// TestRingCyclesLeaveNothing: 20 rings made, used (reads that complete and
// reads whose context ends while they are queued or in the kernel) and
// closed leave no goroutine, no ring or eventfd descriptor and no OS
// thread behind: the submitter's locked thread exits with it (the count
// of threads may move by the runtime's idle ones, not by one a ring).
func TestRingCyclesLeaveNothing(t *testing.T) {
	f, data := testFile(t, 1<<20)
	fd := int(f.Fd())
	// One ring first, so that whatever the runtime starts once is there.
	if r, err := newRing(ringOptions{}); err != nil {
		t.Skip("io_uring unavailable:", err)
	} else {
		r.close()
		<-r.torndown()
	}
	runtime.GC()
	baseG, baseFDs, baseT := runtime.NumGoroutine(), ringFDs(t), proctest.Threads(t)
	for cycle := range 20 {
		r, err := newRing(ringOptions{Entries: 8, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				if i%2 == 1 {
					cancel() // gone before, while queued or in the kernel
				} else {
					defer cancel()
				}
				buf := make([]byte, 64<<10)
				off := int64(i) * 64 << 10
				n, err := r.readFull(ctx, fd, buf, off, &readOptions{})
				if err == nil && (n != len(buf) || !bytes.Equal(buf, data[off:off+int64(n)])) {
					t.Errorf("cycle %d read %d: %d bytes, wrong data", cycle, i, n)
				}
			}()
		}
		wg.Wait()
		if err := r.close(); err != nil {
			t.Fatalf("cycle %d: Close: %v", cycle, err)
		}
		select {
		case <-r.torndown():
		case <-time.After(10 * time.Second):
			t.Fatalf("cycle %d: ring not torn down", cycle)
		}
	}
	ok := waitFor(10*time.Second, func() bool {
		return runtime.NumGoroutine() <= baseG && ringFDs(t) <= baseFDs && proctest.Threads(t) <= baseT+10
	})
	t.Logf("goroutines %d→%d, ring fds %d→%d, threads %d→%d", baseG, runtime.NumGoroutine(), baseFDs, ringFDs(t), baseT, proctest.Threads(t))
	if !ok {
		t.Fatal("20 ring cycles left goroutines, descriptors or threads behind")
	}
}

// TestNoWaitProbeWithoutNoWaitSupport: FUSE does not take RWF_NOWAIT
// (preadv2 fails with EOPNOTSUPP even for cached pages): the probe then
// says "not known resident" for every span, which sends the span to the
// ring, never "resident", which would hold a thread in a blocking read;
// and the ring still reads the file exactly.
func TestNoWaitProbeWithoutNoWaitSupport(t *testing.T) {
	const size = 1 << 20
	file := &fuseFile{size: size}
	mnt := mountFUSE(t, map[string]*fuseFile{"f": file})
	f := openFUSE(t, mnt, "f")
	fd := int(f.Fd())
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err) // now in the page cache
	}
	if _, err := pagecache.ReadNoWait(fd, buf[:4096], 0); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("preadv2(RWF_NOWAIT) on a cached FUSE page: %v; this kernel's FUSE takes it", err)
	}
	p := pagecache.NewProbe(fd, false, 0)
	for off := int64(0); off < size; off += 256 << 10 {
		if n, _ := p.Resident(off, 256<<10); n != 0 {
			t.Fatalf("span at %d reported resident (%d) where no-wait reads fail with EOPNOTSUPP", off, n)
		}
	}
	r, rerr := newRing(ringOptions{})
	if rerr != nil {
		t.Skip("io_uring unavailable:", rerr)
	}
	defer r.close()
	got := make([]byte, size)
	n, err := r.readFull(t.Context(), fd, got, 0, &readOptions{NoBlockDevice: fileio.NoBlockDeviceFD(fd)})
	if err != nil || n != size {
		t.Fatalf("ring read: %d bytes, %v", n, err)
	}
	for i := range got {
		if got[i] != fuseByte(int64(i)) {
			t.Fatalf("byte %d: %d, want %d", i, got[i], fuseByte(int64(i)))
		}
	}
}
