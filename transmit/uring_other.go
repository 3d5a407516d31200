//go:build !linux || flashserve_portable

package transmit

import (
	"context"
	"errors"
)

// Ring is io_uring, which only Linux has; elsewhere there is none
// (AcquireRing returns nil) and the handler keeps to sendfile and copy.
type Ring struct{}

const ringSupported = false

func newRing(ringOptions) (*Ring, error) { return nil, errors.New("io_uring: only on Linux") }

// The methods below are never called: there is no Ring here.

func (r *Ring) readLent(context.Context, int, int64, *readOptions, func(context.Context) ([]byte, error)) ([]byte, int, error) {
	return nil, 0, errRingClosed
}

func (r *Ring) ReadLending(context.Context, int, []byte, int64, func() func()) (int, error) {
	return 0, errRingClosed
}

func preadFull(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }

func (r *Ring) setWorkers(int) {}

func (r *Ring) NoWaitFirst() bool { return false }

func (r *Ring) workerCap() int { return 0 }

func (r *Ring) close() error { return nil }

// Reads reports 0, 0: there is no ring here.
func (r *Ring) Reads() (inFlight, slots int) { return 0, 0 }
