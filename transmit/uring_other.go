//go:build !linux || flashserve_portable

package transmit

import (
	"context"
	"errors"
	"time"
)

// Ring is io_uring, which only Linux has; elsewhere NewRing always fails
// and the handler keeps to sendfile and copy.
type Ring struct{}

// RingOptions size a Ring.
type RingOptions struct {
	Entries, Workers int
	CloseWait        time.Duration
}

// ReadOptions say how a read may be let go and how to submit it.
type ReadOptions struct {
	Hold          func() (release func())
	NoBlockDevice bool
	File          uint64
}

// ErrRingAbandoned is returned by Close when reads were still in the
// kernel; never here.
var ErrRingAbandoned = errors.New("io_uring: ring abandoned with reads in the kernel")

// ErrRingClosed is returned by reads on a closed Ring.
var ErrRingClosed = errors.New("io_uring: ring closed")

// NewRing fails: there is no io_uring on this OS.
func NewRing(RingOptions) (*Ring, error) {
	return nil, errors.New("io_uring: only on Linux")
}

// ReadAt is never called: there is no Ring here.
func (r *Ring) ReadAt(int, []byte, int64) (int, error) { return 0, ErrRingClosed }

// Read is never called: there is no Ring here.
func (r *Ring) Read(context.Context, int, []byte, int64, *ReadOptions) (int, error) {
	return 0, ErrRingClosed
}

// ReadFull is never called: there is no Ring here.
func (r *Ring) ReadFull(context.Context, int, []byte, int64, *ReadOptions) (int, error) {
	return 0, ErrRingClosed
}

// ReadLent is never called: there is no Ring here.
func (r *Ring) ReadLent(context.Context, int, int64, *ReadOptions, func(context.Context) ([]byte, error)) ([]byte, int, error) {
	return nil, 0, ErrRingClosed
}

// ReadLending is never called: there is no Ring here.
func (r *Ring) ReadLending(context.Context, int, []byte, int64, func() func()) (int, error) {
	return 0, ErrRingClosed
}

// SetWorkers does nothing here.
func (r *Ring) SetWorkers(int) {}

// Workers is 0 here.
func (r *Ring) Workers() int { return 0 }

// Busy is 0, 0 here.
func (r *Ring) Busy() (ops, files int) { return 0, 0 }

// NoBlockDevice is false here: it only changes how the ring submits.
func NoBlockDevice(int) bool { return false }

// InjectShortReads does nothing here.
func (r *Ring) InjectShortReads(int) {}

// InjectFailures does nothing here.
func (r *Ring) InjectFailures(int) {}

// Close does nothing here.
func (r *Ring) Close() error { return nil }

// RingSupported is true where the io_uring engine is compiled in.
const RingSupported = false
