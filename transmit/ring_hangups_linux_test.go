//go:build linux && !flashserve_portable

package transmit

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// heldBody counts its holds and releases.
type heldBody struct {
	fileBody
	holds, releases *atomic.Int64
}

func (b heldBody) Hold()    { b.holds.Add(1) }
func (b heldBody) Release() { b.releases.Add(1) }

// TestRingFirstStormOfHangups: small bodies of evicted files read ring
// first (a no-wait half with each first read), by requests whose clients
// hang up at random moments, whole and as ranges: every completed body
// has the file's bytes, and afterwards the ring has nothing in flight,
// the cold budget is whole, every hold of a file is released and no
// goroutine is left.
func TestRingFirstStormOfHangups(t *testing.T) {
	s := ringSender(t)
	if !s.Ring.NoWaitFirst() {
		t.Skip("no IOSQE_CQE_SKIP_SUCCESS")
	}
	const n, size, rounds = 48, 8192, 6
	files := make([]heldBody, n)
	wants := make([][]byte, n)
	var holds, releases atomic.Int64
	for i := range files {
		f, w := testFile(t, size)
		files[i], wants[i] = heldBody{fileBody{f}, &holds, &releases}, w
	}
	g0 := runtime.NumGoroutine()
	var completed, hungUp, ringFirst atomic.Int64
	for round := range rounds {
		for _, b := range files {
			evict(t, b.f)
		}
		readTogether(n, func(g int) {
			atomic.StoreInt32(&s.firstReads.score, firstReadsMax)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if round%2 == 1 {
				d := time.Duration(rand.IntN(300)) * time.Microsecond
				go func() { time.Sleep(d); cancel() }()
			}
			start, length := int64(0), int64(size)
			if g%3 == 1 {
				start = int64(rand.IntN(size - 1))
				length = int64(1 + rand.IntN(size-int(start)))
			}
			before := stats.ringFirstBodies.Load()
			w := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			_, err := s.Send(w, req, files[g], &Transfer{Engine: EngineIOUring}, start, length)
			if stats.ringFirstBodies.Load() > before {
				ringFirst.Add(1)
			}
			if err == nil {
				completed.Add(1)
				if !bytes.Equal(w.Body.Bytes(), wants[g][start:start+length]) {
					t.Errorf("file %d [%d, +%d): wrong bytes (%d)", g, start, length, w.Body.Len())
				}
			} else if ctx.Err() != nil {
				hungUp.Add(1)
			} else {
				t.Errorf("file %d: %v", g, err)
			}
		})
	}
	t.Logf("%d completed, %d hung up, ring first in %d", completed.Load(), hungUp.Load(), ringFirst.Load())
	if ringFirst.Load() == 0 {
		t.Fatal("no body went ring first")
	}
	settled := waitFor(10*time.Second, func() bool {
		ops, _ := s.Ring.busy()
		return ops == 0 && len(coldBudget) == 0 && holds.Load() == releases.Load() && runtime.NumGoroutine() <= g0+2
	})
	ops, files2 := s.Ring.busy()
	if !settled {
		t.Errorf("after the storm: %d ops and %d files busy in the ring, %d cold chunks out, %d holds %d releases, %d goroutines (was %d)",
			ops, files2, len(coldBudget), holds.Load(), releases.Load(), runtime.NumGoroutine(), g0)
	}
}
