//go:build linux && !flashserve_portable

package transmit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNoWaitHalvesOverflowCompletionRing: a read with a no-wait half can
// post three completions (the failed half, the read, its cancellation)
// while the completion ring holds two per read. While the reaper lags
// (here: held in an abandoned read's release, as a descheduled reaper on
// a loaded machine), 4 cancelled reads of empty pipes with no-wait halves
// post 12 completions into a completion ring of 8. The kernel keeps the
// excess on its overflow list (IORING_FEAT_NODROP) and hands it over only
// when entered with IORING_ENTER_GETEVENTS, which the ring never does:
// once the reaper catches up, every reader must still return, and so
// must a new read entered after (the kernel puts its completion behind
// the overflowed ones: the whole ring wedges).
func TestNoWaitHalvesOverflowCompletionRing(t *testing.T) {
	// The geometry before the fix: a completion ring of 8, 4 reads in
	// flight. The ring is sized for three completions a read now
	// (TestCompletionRingHoldsThreePerRead), so only a lagging reaper and
	// late cancellations could overflow it: what is shown here is that the
	// ring then comes through.
	r, err := newRing(ringOptions{Entries: 4, Workers: 4, cqEntries: 8, inFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if !r.NoWaitFirst() {
		t.Skip("no IOSQE_CQE_SKIP_SUCCESS: reads have no no-wait half")
	}
	pipe := func() (rd, wr int) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
		return p[0], p[1]
	}
	// Stall the reaper: an abandoned read whose release blocks.
	stall, stalled := make(chan struct{}), make(chan struct{})
	p0, _ := pipe()
	ctx0, cancel0 := context.WithCancel(context.Background())
	go r.readOnce(ctx0, p0, make([]byte, 16), 0, &readOptions{Hold: func() func() {
		return func() { close(stalled); <-stall }
	}})
	if !waitFor(10*time.Second, func() bool { return r.counts().entered.Load() == 1 }) {
		t.Fatal("the first read was not entered")
	}
	cancel0()
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned read was not reaped")
	}
	// 4 reads with no-wait halves: each half fails at once (an empty
	// pipe), the read waits.
	const n = 4
	cancels := make([]context.CancelFunc, n)
	done := make(chan error, n)
	for i := range n {
		p, _ := pipe()
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		go func() {
			o := readOptions{NoWaitFirst: true}
			_, err := r.readOnce(ctx, p, make([]byte, 16), 0, &o)
			done <- err
		}()
	}
	if !waitFor(10*time.Second, func() bool { return r.counts().entered.Load() == 1+n }) {
		t.Fatalf("%d reads entered, want %d", r.counts().entered.Load(), 1+n)
	}
	for _, c := range cancels {
		c()
	}
	// The cancellations go in and complete (8 more completions, 12 in all).
	full := waitFor(5*time.Second, func() bool {
		return atomic.LoadUint32(r.cqTail)-atomic.LoadUint32(r.cqHead) == uint32(len(r.cqes))
	})
	t.Logf("completion ring full (%d of %d) while the reaper lags: %v", atomic.LoadUint32(r.cqTail)-atomic.LoadUint32(r.cqHead), len(r.cqes), full)
	close(stall)
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-done:
		case <-deadline:
			t.Errorf("%d of %d cancelled readers still wait 10 s after the reaper caught up: their completions sit on the kernel's overflow list", n-i, n)
			// A new read after it: its completion joins the overflow list
			// too (the kernel keeps the order), so the ring is wedged.
			f, _ := testFile(t, 4096)
			fresh := make(chan error, 1)
			go func() {
				_, err := r.readFull(context.Background(), int(f.Fd()), make([]byte, 4096), 0, &readOptions{})
				fresh <- err
			}()
			select {
			case err := <-fresh:
				t.Logf("a new read after the overflow returned: %v", err)
			case <-time.After(5 * time.Second):
				t.Errorf("a new read of a resident file, entered after the overflow, has not returned in 5 s: the ring is wedged")
			}
			// Flush the overflow so that the readers and the ring end.
			unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 0, 1 /* IORING_ENTER_GETEVENTS */, 0, 0)
			r.wake()
			var b [8]byte
			b[0] = 1
			r.event.Write(b[:])
			for range n - i + 1 {
				select {
				case <-done:
				case <-fresh:
				case <-time.After(10 * time.Second):
					t.Fatal("readers still wait after a GETEVENTS enter")
				}
			}
			return
		}
	}
	if r.counts().overflows.Load() == 0 {
		t.Error("the ring's completions did not overflow: the test did not reach the case it is about")
	}
}

// TestCompletionRingHoldsThreePerRead: the default ring has room in its
// completion ring for three completions of every read it lets in flight
// (the read, its failed no-wait half, a cancellation), so that no
// completion needs the kernel's overflow list.
func TestCompletionRingHoldsThreePerRead(t *testing.T) {
	for _, entries := range []int{0, 4, 64} {
		r, err := newRing(ringOptions{Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		inFlight := len(r.ops)
		if inFlight == 0 || len(r.cqes) < 3*inFlight || len(r.slots) != 0 || cap(r.slots) != inFlight {
			t.Errorf("Entries %d: %d reads in flight, a completion ring of %d: want room for 3 completions each", entries, inFlight, len(r.cqes))
		}
		if entries == 0 && inFlight < 256 {
			t.Errorf("the default ring lets %d reads in flight, want 256 as before", inFlight)
		}
		r.close()
	}
}
