//go:build linux && !flashserve_portable

package transmit

import (
	"context"
	"sync"
	"sync/atomic"
)

// setRingOnly sets the policy that reads every byte of an EngineIOUring
// body through the ring, or the default one.
func (s *Sender) setRingOnly(on bool) {
	s.Policy = PolicyAuto
	if on {
		s.Policy = PolicyIOUring
	}
}

// readAt reads len(buf) bytes of the file fd at off through the ring,
// once: a short count is what the kernel returned.
func (r *Ring) readAt(fd int, buf []byte, off int64) (int, error) {
	return r.readOnce(context.Background(), fd, buf, off, &readOptions{})
}

// readOnce submits one read of len(buf) bytes at off and waits for it, or
// for ctx to end (Ring.read).
func (r *Ring) readOnce(ctx context.Context, fd int, buf []byte, off int64, o *readOptions) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	return r.read(ctx, fd, buf, off, o, nil)
}

// injectFailures makes the next n completions fail as if the kernel had
// cancelled them, and injectShortReads the next n report half their count.
func (r *Ring) injectFailures(n int)   { faults.fail.Store(int32(n)) }
func (r *Ring) injectShortReads(n int) { faults.short.Store(int32(n)) }

// ringCounts are what a ring did (ringTrace): io_uring_enter calls that
// submitted entries, reads entered, reads with a no-wait half, no-wait
// halves that failed, flushes of the kernel's overflow list.
type ringCounts struct {
	enters, entered, noWaitFirst, metDisk, overflows atomic.Int64
}

var ringCountsOf sync.Map // *Ring → *ringCounts

func (r *Ring) counts() *ringCounts {
	v, _ := ringCountsOf.LoadOrStore(r, new(ringCounts))
	return v.(*ringCounts)
}

func init() {
	ringTrace = func(r *Ring, ev ringEvent, n int64) {
		c := r.counts()
		switch ev {
		case evEnter:
			c.enters.Add(n)
		case evEntered:
			c.entered.Add(n)
		case evNoWaitHalves:
			c.noWaitFirst.Add(n)
		case evMetDisk:
			c.metDisk.Add(n)
		case evOverflow:
			c.overflows.Add(n)
		}
	}
}
