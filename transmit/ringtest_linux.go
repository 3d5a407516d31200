//go:build linux && !flashserve_portable

package transmit

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/flashserve/caddy-flash-serve/internal/ringtest"
)

// The tests look into the rings through what this file sets: the
// handler's tests (package flashserve) through ringtest, transmit's own
// through export_test.go.

// faults make the rings' next completions fail as if the kernel had
// cancelled them (fail), or report half their count (short), as kernels
// before 5.9 and some network filesystems do.
var faults struct{ fail, short atomic.Int32 }

func injectedFault(res int32) int32 {
	if faults.fail.Load() > 0 && faults.fail.Add(-1) >= 0 {
		return -int32(unix.ECANCELED)
	}
	if res > 1 && faults.short.Load() > 0 && faults.short.Add(-1) >= 0 {
		res /= 2
	}
	return res
}

// busy reports the operations in flight (submitted, queued or abandoned
// and not yet completed) and the descriptors with reads in flight.
func (r *Ring) busy() (ops, files int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.slots), len(r.gates)
}

// torndown is closed once a closed ring is torn down.
func (r *Ring) torndown() <-chan struct{} { return r.reaped }

func init() {
	ringtest.Shared = func() (bool, error) {
		h := sharedHolder()
		if h == nil {
			return false, nil
		}
		return h.ring != nil, h.err
	}
	ringtest.Busy = func() (int, int) {
		if r := SharedRing(); r != nil {
			return r.busy()
		}
		return 0, 0
	}
	ringtest.Workers = func() int {
		if r := SharedRing(); r != nil {
			return r.workerCap()
		}
		return 0
	}
	ringtest.Done = func() <-chan struct{} {
		if r := SharedRing(); r != nil {
			return r.torndown()
		}
		return nil
	}
	ringtest.InjectFailures = func(n int) { faults.fail.Store(int32(n)) }
	ringtest.ColdChunksLent = func() int { return len(coldBudget) }
	ringtest.ColdChunk = coldChunk
}
