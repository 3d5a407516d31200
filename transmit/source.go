package transmit

import (
	"io"
	"time"

	"github.com/flashserve/caddy-flash-serve/internal/pagecache"
)

// fileSource is a response body: length bytes of a shared, open file from
// an offset. It reads with pread, never moving the descriptor's offset, so
// one descriptor can serve any number of concurrent responses.
//
// Handed to a ResponseWriter's ReadFrom, it travels down Caddy's and
// net/http's writers to the connection. A connection wrapped by the
// flash_serve listener wrapper recognises it there, under any number of
// *io.LimitedReader, and sends it with sendfile(2) at an explicit offset.
// Anywhere else (TLS, HTTP/2, HTTP/3, encode) it is read like any reader.
type fileSource struct {
	File io.ReaderAt
	// FD is File's descriptor, read once when the file was opened.
	FD int
	// Off is the next offset to send; N the bytes left.
	Off, N int64
	// ZeroCopy is set once the connection has sent bytes with sendfile.
	ZeroCopy bool
	// Refused is set when the kernel refused sendfile for this body
	// (EINVAL, ENOSYS, EOPNOTSUPP); the connection then copies the rest.
	Refused bool
	// Sent counts the bytes sent so far, by either path.
	Sent int64

	// Idle is the write-idle policy of the response, which the wrapped
	// connection applies inside a sendfile turn. The zero value renews
	// nothing.
	Idle idlePolicy

	// ReadTurn, if positive, is the most bytes Read returns after
	// StartTurn before it reports io.EOF. A writer chain that copies the
	// body (no listener wrapper) then returns to its caller after each
	// such turn, and Caddy's write-idle writer renews its deadline
	// before the next one, as it does for every chunk it writes itself.
	// The wrapped connection's sendfile and copy do not count against it.
	ReadTurn int64
	turnLeft int64
}

// idlePolicy is Caddy's write-idle deadline for one response
// (write_idle_timeout, write_min_rate, write_timeout), which the wrapped
// connection keeps within a sendfile turn: Caddy sets the deadline once
// per turn, and a turn can be far larger than its write chunk.
type idlePolicy struct {
	// Timeout is how long a write may make no progress. Zero renews
	// nothing.
	Timeout time.Duration
	// MinRate, if positive, is the rate in bytes per second the client
	// must keep over the whole body: each byte sent adds 1/MinRate
	// seconds to the deadline the turn started with, instead of the
	// deadline being pushed to now+Timeout.
	MinRate int64
	// Ceiling, if set, is never passed (Caddy's HardDeadline, from
	// write_timeout).
	Ceiling time.Time
}

// StartTurn gives Read a fresh ReadTurn.
func (s *fileSource) StartTurn() { s.turnLeft = s.ReadTurn }

// Read implements io.Reader with pread. A file that ends before N bytes
// gives a *ReadError wrapping errTruncated, never padding.
func (s *fileSource) Read(p []byte) (int, error) {
	if s.N <= 0 {
		return 0, io.EOF
	}
	if s.ReadTurn > 0 {
		if s.turnLeft <= 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > s.turnLeft {
			p = p[:s.turnLeft]
		}
	}
	n, err := s.fill(p)
	s.Sent += int64(n)
	s.turnLeft -= int64(n)
	return n, err
}

// fill reads the next bytes of the body into p (at most N) with pread,
// and moves Off and N past them. Every byte comes from the file now:
// nothing kept of it earlier is sent with them (a file written through a
// shared mapping changes with no event).
func (s *fileSource) fill(p []byte) (int, error) {
	if int64(len(p)) > s.N {
		p = p[:s.N]
	}
	n, err := s.File.ReadAt(p, s.Off)
	s.Off += int64(n)
	s.N -= int64(n)
	if err := pagecache.ShortRead(n, len(p), err); err != nil {
		return n, &ReadError{Offset: s.Off, Err: err}
	}
	return n, nil
}

// findSource looks for a *fileSource under any depth of *io.LimitedReader
// (Caddy's write-idle chunking adds one, net/http's ReadFrom may add
// another) and returns it with the smallest limit above it.
func findSource(r io.Reader) (src *fileSource, limit int64) {
	limit = -1
	for {
		switch v := r.(type) {
		case *fileSource:
			if limit < 0 || limit > v.N {
				limit = v.N
			}
			return v, limit
		case *io.LimitedReader:
			if limit < 0 || v.N < limit {
				limit = v.N
			}
			r = v.R
		default:
			return nil, 0
		}
	}
}

// consumed subtracts n from every *io.LimitedReader above the source, as
// reading through them would have.
func consumed(r io.Reader, n int64) {
	for {
		lr, ok := r.(*io.LimitedReader)
		if !ok {
			return
		}
		lr.N -= n
		r = lr.R
	}
}
