//go:build !linux || flashserve_portable

package transmit

import (
	"context"
	"errors"
	"time"
)

// Ring is io_uring, which only Linux has; elsewhere there is none
// (AcquireRing returns nil) and the handler keeps to sendfile and copy.
type Ring struct{}

// ringOptions size a Ring.
type ringOptions struct {
	Entries, Workers int
	CloseWait        time.Duration
}

// readOptions say how a read may be let go and how to submit it.
type readOptions struct {
	Hold          func() (release func())
	NoBlockDevice bool
	File          uint64
	NoWaitFirst   bool
	MetDisk       bool
}

// errRingAbandoned is returned by close when reads were still in the
// kernel; never here.
var errRingAbandoned = errors.New("io_uring: ring abandoned with reads in the kernel")

// errRingClosed is returned by reads on a closed Ring.
var errRingClosed = errors.New("io_uring: ring closed")

// newRing fails: there is no io_uring on this OS.
func newRing(ringOptions) (*Ring, error) {
	return nil, errors.New("io_uring: only on Linux")
}

// readLent is never called: there is no Ring here.
func (r *Ring) readLent(context.Context, int, int64, *readOptions, func(context.Context) ([]byte, error)) ([]byte, int, error) {
	return nil, 0, errRingClosed
}

// ReadLending is never called: there is no Ring here.
func (r *Ring) ReadLending(context.Context, int, []byte, int64, func() func()) (int, error) {
	return 0, errRingClosed
}

// preadFull is never called: it redoes failed ring reads.
func preadFull(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }

// setWorkers does nothing here.
func (r *Ring) setWorkers(int) {}

// NoWaitFirst is false here: there is no Ring.
func (r *Ring) NoWaitFirst() bool { return false }

// workerCap is 0 here.
func (r *Ring) workerCap() int { return 0 }

// close does nothing here.
func (r *Ring) close() error { return nil }

// ringSupported is true where the io_uring engine is compiled in.
const ringSupported = false
