// Package ringtest lets the module's tests look into the io_uring ring
// that package transmit shares between handlers and does not export:
// transmit sets these at init, only tests call them.
package ringtest

var (
	// Shared reports whether the shared ring exists now, and if it does
	// not, why the last attempt to make it failed (nil if none was made).
	Shared func() (ok bool, err error)
	// Busy reports the shared ring's operations in flight (submitted,
	// queued, or abandoned and not completed) and the files they read.
	Busy func() (ops, files int)
	// Workers is the shared ring's io-wq cap, as asked for last (0 when
	// there is no ring).
	Workers func() int
	// Done returns a channel that is closed once the shared ring, once
	// closed, is torn down.
	Done func() <-chan struct{}
	// InjectFailures makes the next n completions of any ring in the
	// process fail as if the kernel had cancelled them.
	InjectFailures func(n int)
	// ColdChunksLent is how many chunks of the cold-read budget are lent,
	// and ColdChunk the size of one.
	ColdChunksLent func() int
	ColdChunk      int64
)
