//go:build !linux || flashserve_portable

package transmit

import "errors"

// Ring is io_uring, which only Linux has; elsewhere NewRing always fails
// and the handler keeps to sendfile and copy.
type Ring struct{}

// RingOptions size a Ring.
type RingOptions struct {
	Entries, Workers int
}

// ErrRingClosed is returned by reads on a closed Ring.
var ErrRingClosed = errors.New("io_uring: ring closed")

// NewRing fails: there is no io_uring on this OS.
func NewRing(RingOptions) (*Ring, error) {
	return nil, errors.New("io_uring: only on Linux")
}

// ReadAt is never called: there is no Ring here.
func (r *Ring) ReadAt(int, []byte, int64) (int, error) { return 0, ErrRingClosed }

// InjectFailures does nothing here.
func (r *Ring) InjectFailures(int) {}

// Close does nothing here.
func (r *Ring) Close() error { return nil }

// ResidentPrefix cannot see the page cache here and says everything is:
// the handler then sends as it would without io_uring.
func ResidentPrefix(fd int, off, n int64) (int64, error) { return n, nil }

// ReadNoWait is not available here; it is never called without a Ring.
func ReadNoWait(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }

// RingSupported is true where the io_uring engine is compiled in.
const RingSupported = false
