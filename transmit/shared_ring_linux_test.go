//go:build linux && !flashserve_portable

package transmit

import (
	"github.com/flashserve/caddy-flash-serve/internal/proctest"

	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestSharedRingLifecycle: handlers take and give back the shared ring as
// reloads do (the new one before the old one goes), so one ring lives
// through them; readers of SharedRing, as the admin prewarm is, go on
// with the same bytes while the last reference closes it (pread redoes
// what the closed ring refuses); once the last goes, neither the ring's
// descriptors nor its goroutines are left.
func TestSharedRingLifecycle(t *testing.T) {
	f, want := testFile(t, 1<<20)
	runtime.GC()
	fds, goroutines := proctest.FDs(t), runtime.NumGoroutine()
	for round := range 10 {
		first := AcquireRing(4, false, zap.NewNop())
		if first == nil {
			t.Fatal("io_uring should work on this kernel")
		}
		// A reload: the new handler is provisioned, then the old one goes.
		if again := AcquireRing(8, false, zap.NewNop()); again != first {
			t.Fatalf("round %d: a second handler got another ring", round)
		}
		ReleaseRing()
		if SharedRing() != first || first.workerCap() != 8 {
			t.Fatalf("round %d: the ring did not outlive the old handler with the new cap (%d)", round, first.workerCap())
		}
		ring := SharedRing()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		stop := make(chan struct{})
		var reads atomic.Int64
		for range 4 {
			wg.Go(func() {
				buf := make([]byte, 256<<10)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					off := int64(i%4) * int64(len(buf))
					n, err := ring.ReadLending(context.Background(), int(f.Fd()), buf, off, nil)
					if err != nil || n != len(buf) || !bytes.Equal(buf, want[off:off+int64(n)]) {
						errs <- fmt.Errorf("read at %d: %d bytes, %v", off, n, err)
						return
					}
					reads.Add(1)
				}
			})
		}
		waitReads := func(n int64) {
			for deadline := time.Now().Add(10 * time.Second); reads.Load() < n && len(errs) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		waitReads(4) // the readers are reading when the ring closes
		fallbacks := Snapshot().RingFallbacks
		ReleaseRing() // the last handler goes
		if SharedRing() != nil {
			t.Fatalf("round %d: a ring is still shared after the last release", round)
		}
		waitReads(reads.Load() + 4) // and read on the closed ring
		if Snapshot().RingFallbacks == fallbacks && len(errs) == 0 {
			t.Errorf("round %d: no read met the closed ring", round)
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: a reader across the close: %v", round, err)
		}
	}
	eventually := func(what string, now func() int, was int) {
		deadline := time.Now().Add(10 * time.Second)
		for now() > was && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := now(); n > was {
			t.Errorf("%d %s after the last release, %d before", n, what, was)
		}
	}
	eventually("descriptors", func() int { return proctest.FDs(t) }, fds)
	eventually("goroutines", runtime.NumGoroutine, goroutines)
}
